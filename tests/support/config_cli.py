"""Run `python -m runtime` as a user would, with a guard that ends the process on any network connection."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]

# Exit status and stderr marker of a process that tried to open a network connection.
GUARD_EXIT = 99
GUARD_MARKER = "NETWORK-GUARD: a connection was attempted"

_GUARD = f'''
import os
import socket
import sys


def _refuse(*args, **kwargs):
    sys.stderr.write("{GUARD_MARKER}\\n")
    sys.stderr.flush()
    os._exit({GUARD_EXIT})


socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
'''

# Nothing listens on port 1: an app that got as far as connecting would only retry and fail.
UNREACHABLE = "127.0.0.1:1"


def install_network_guard(directory: Path) -> Path:
    """A `sitecustomize` that makes any socket connect end the process with GUARD_EXIT."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_GUARD)
    return directory


def write_yaml(path: Path, app: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    return path


def run_cli(
    app: Path, guard_dir: Path, *, importable: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Exit status and output of `python -m runtime app` from the repo root; `importable` joins the path."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("NOPE_")}
    path = os.pathsep.join(str(directory) for directory in (guard_dir, importable) if directory is not None)
    env.update(PYTHONPATH=path, KAFKA_BOOTSTRAP_SERVERS=UNREACHABLE, RUNTIME_LOG_LEVEL="WARNING")
    return subprocess.run(
        [sys.executable, "-m", "runtime", str(app)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
