"""Write app YAMLs and run workers as real processes (`python -m runtime app.yaml`)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import yaml

REPO = Path(__file__).resolve().parents[2]
# Every worker a test starts; tests/integration/conftest.py kills those still running after each test.
SPAWNED: list[subprocess.Popen[Any]] = []


def write_app(directory: Path, app: dict[str, Any], name: str = "app.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(app))
    return path


def spawn_worker(app: Path, *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    output = log.open("ab") if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(
        [sys.executable, "-m", "runtime", str(app), *args],
        cwd=REPO, env=env, stdout=output, stderr=output, start_new_session=True,
    )  # fmt: skip
    SPAWNED.append(process)
    return process


def numbered(count: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    """Records keyed `k<n % 97>` with msgpack values {"n": n}."""
    return [(f"k{n % 97}".encode(), msgpack.packb({"n": n})) for n in range(start, start + count)]


def read_log(log: Path) -> str:
    """What a worker has logged so far; nothing before it created its log."""
    return log.read_text() if log.exists() else ""


def running_tasks(log: Path) -> set[str]:
    """The tasks a worker runs as its log tells: those it started and has not stopped since."""
    tasks: set[str] = set()
    for kind, listed in re.findall(r"(started|stopped) tasks \[(.*)\]$", read_log(log), re.MULTILINE):
        named = set(re.findall(r"'([^']+)'", listed))
        tasks = tasks | named if kind == "started" else tasks - named
    return tasks


async def until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait until `condition()` holds; an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)
