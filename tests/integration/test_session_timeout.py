"""A session timeout the broker would refuse is a mistake in the YAML, told before the worker joins."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import TopicNamer
from tests.support.running import REPO, write_app


def test_a_session_timeout_outside_the_brokers_bounds_names_the_field(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap, "consumer": {"session_timeout_ms": 10}},
        "topics": {topic_name("in"): {}},
        "processors": [{"name": "p", "class": "processors:Processor", "inputs": [topic_name("in")]}],
        "state_dir": str(tmp_path / "state"),
    }
    path = write_app(tmp_path, app)
    result = subprocess.run(
        [sys.executable, "-m", "runtime", str(path), "--until-caught-up"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    first, field = result.stderr.splitlines()[-2:]
    assert first == f"error in {path}:"
    assert re.fullmatch(
        r"  kafka.consumer.session_timeout_ms: the broker takes \d+ to \d+ ms "
        r"\(its group.min.session.timeout.ms and group.max.session.timeout.ms\), not 10",
        field,
    ), field
    assert "Traceback" not in result.stderr
