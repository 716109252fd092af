"""A broker that answers but refuses the app's security settings is reported as that, at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import TopicNamer
from tests.support.running import REPO, write_app

PASSWORD = "s3cret-for-the-test"


def test_sasl_against_a_plaintext_listener_is_an_authentication_error(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """The test broker's listener is PLAINTEXT: it refuses the SASL handshake (ILLEGAL_SASL_STATE)."""
    sasl = {"mechanism": "PLAIN", "username": "payments", "password": "${TEST_KAFKA_PASSWORD}"}
    app = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap, "security": {"protocol": "SASL_PLAINTEXT", "sasl": sasl}},
        "topics": {topic_name("in"): {}},
        "processors": [{"name": "p", "class": "processors:Processor", "inputs": [topic_name("in")]}],
        "state_dir": str(tmp_path / "state"),
    }
    env = {**os.environ, "PYTHONPATH": str(REPO), "TEST_KAFKA_PASSWORD": PASSWORD}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "runtime", str(write_app(tmp_path, app)), "--until-caught-up"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert f"error: Kafka at {kafka_bootstrap} refused the admin client's authentication" in result.stderr
    assert "IllegalSaslStateError" in result.stderr
    assert "the listener does not expect SASL" in result.stderr
    assert "cannot reach Kafka" not in result.stderr and "retrying" not in result.stderr
    assert PASSWORD not in result.stderr
    assert elapsed < 10, f"took {elapsed:.1f}s: retried as if the broker were unreachable"
