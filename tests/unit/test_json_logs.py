"""`--log-format json`: one JSON object per line, with the fields a log pipeline searches by."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.support.config_cli import REPO

SCRIPT = textwrap.dedent("""
    import asyncio, logging
    from opentelemetry.sdk.trace import TracerProvider
    from runtime.console import configure_logging
    from runtime.log_fields import CURRENT_TASK, LOG_FIELDS

    configure_logging("INFO", "json")
    LOG_FIELDS.app, LOG_FIELDS.worker = "payments", 1
    log = logging.getLogger("processors.fraud")
    log.info("started with %d rules", 3)

    async def actor():
        CURRENT_TASK.set(("fraud-4", 4))
        with TracerProvider().get_tracer("t").start_as_current_span("process"):
            log.warning("card %s looks stolen", "c-1")
        try:
            1 / 0
        except ZeroDivisionError:
            log.exception("record failed")

    async def main():
        await asyncio.create_task(actor())
        log.info("a line of no task")

    asyncio.run(main())
    logging.getLogger("aiokafka.conn").error("sasl://user:secret@broker:9092 is slow")
""")


def run(script: str, *env: tuple[str, str]) -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", **dict(env)}, check=True)  # fmt: skip
    return [json.loads(line) for line in result.stderr.splitlines()]


def test_each_line_is_an_object_with_app_worker_task_and_trace() -> None:
    lines = run(SCRIPT)
    assert [line["message"] for line in lines] == [
        "started with 3 rules",
        "card c-1 looks stolen",
        "record failed",
        "a line of no task",
        "sasl://***@broker:9092 is slow",  # redacted as the text format is
    ]
    started, traced, failed, untasked, client = lines
    for line in lines:
        assert {"time", "level", "logger", "pid"} <= line.keys() and line["time"].endswith("+00:00")
    assert started["app"] == "payments" and started["worker"] == 1 and started["level"] == "INFO"
    assert "task" not in started and "trace_id" not in started
    assert traced["task"] == "fraud-4" and traced["partition"] == 4 and traced["level"] == "WARNING"
    assert len(traced["trace_id"]) == 32 and len(traced["span_id"]) == 16
    assert failed["task"] == "fraud-4" and "ZeroDivisionError" in failed["exc_info"] and "trace_id" not in failed
    assert "task" not in untasked  # the actor's context is its own
    assert client["logger"] == "aiokafka.conn" and client["level"] == "ERROR"


def test_the_format_is_taken_from_the_environment_and_a_wrong_one_is_refused() -> None:
    script = (
        "import logging\nfrom runtime.console import configure_logging, log_format_from_environment\n"
        "configure_logging('INFO', log_format_from_environment() or 'text')\nlogging.getLogger('x').info('hi')\n"
    )
    assert run(script, ("RUNTIME_LOG_FORMAT", "json"))[0]["message"] == "hi"
    environment = {"PATH": "/usr/bin:/bin", "RUNTIME_LOG_FORMAT": "xml"}
    refused = subprocess.run([sys.executable, "-m", "runtime", "app.yaml"], cwd=REPO, capture_output=True, text=True,
                             env=environment, timeout=60, check=False)  # fmt: skip
    assert refused.returncode == 2 and "RUNTIME_LOG_FORMAT: 'xml' is not one of text, json" in refused.stderr


def test_why_a_worker_stopped_is_a_line_of_the_json_log(tmp_path: Path) -> None:
    app = tmp_path / "app.yaml"
    app.write_text("app_id: a\nprocessors: []\n")
    result = subprocess.run([sys.executable, "-m", "runtime", str(app), "--log-format", "json"], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    last = json.loads(result.stderr.splitlines()[-1])
    assert result.returncode == 2 and last["level"] == "ERROR" and last["message"].startswith(f"error in {app}")
