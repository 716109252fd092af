"""`--workers N`: N worker processes in one consumer group, stopped together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from runtime.config import AppConfig

WORKER_INDEX = "KAFKA_ACTOR_WORKER_INDEX"
"""The environment variable that tells each of the N processes which one it is (0 to N-1)."""


def run_workers(count: int, app: Path, bootstrap: str, until_caught_up: bool, log_level: str) -> int:
    command = [sys.executable, "-m", "runtime", str(app), "--log-level", log_level]
    if until_caught_up:
        command.append("--until-caught-up")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    children = [subprocess.Popen(command, env={**env, WORKER_INDEX: str(index)}) for index in range(count)]

    def forward(signum: int, _frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    return max(child.wait() for child in children)


def for_worker(config: AppConfig, index: int) -> AppConfig:
    """The config of worker `index` of `--workers N`: its Prometheus endpoint on the configured port
    plus its index, so that the N processes on one host do not all try to bind one port."""
    metrics = config.telemetry.metrics
    if not index or metrics.exporter != "prometheus":
        return config
    metrics = metrics.model_copy(update={"port": metrics.port + index})
    return config.model_copy(update={"telemetry": config.telemetry.model_copy(update={"metrics": metrics})})
