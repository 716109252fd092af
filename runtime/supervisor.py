"""`--workers N`: N worker processes in one consumer group, stopped together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType


def run_workers(count: int, app: Path, bootstrap: str, until_caught_up: bool, log_level: str) -> int:
    command = [sys.executable, "-m", "runtime", str(app), "--log-level", log_level]
    if until_caught_up:
        command.append("--until-caught-up")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    children = [subprocess.Popen(command, env=env) for _ in range(count)]

    def forward(signum: int, _frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    return max(child.wait() for child in children)
