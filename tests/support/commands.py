"""Run `python -m runtime <command>` as a user would, against a test's broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.running import REPO, SPAWNED


def command_env(bootstrap: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP_SERVERS": bootstrap}


def run_command(bootstrap: str, *args: str, stdin: str = "", cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Its exit status and output; KAFKA_BOOTSTRAP_SERVERS names the broker for commands given no YAML."""
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        input=stdin, capture_output=True, text=True, env=command_env(bootstrap), cwd=cwd, timeout=120, check=False,
    )  # fmt: skip


def spawn_command(bootstrap: str, *args: str) -> subprocess.Popen[str]:
    """A command left running (`consume --follow`), its stdout piped; stopped after the test if still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "runtime", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=command_env(bootstrap), cwd=REPO,
        start_new_session=True,
    )  # fmt: skip
    SPAWNED.append(process)
    return process


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
