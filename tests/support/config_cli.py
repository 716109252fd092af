"""Run `python -m runtime` as a user would, with a guard that ends the process on any network connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Any

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


def cli_environment(guard_dir: Path, importable: Path | None = None) -> dict[str, str]:
    """The environment of a run: this one's, with the guard (and `importable`) on PYTHONPATH."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("NOPE_")}
    path = os.pathsep.join(str(directory) for directory in (guard_dir, importable) if directory is not None)
    env.update(PYTHONPATH=path, KAFKA_BOOTSTRAP_SERVERS=UNREACHABLE, RUNTIME_LOG_LEVEL="WARNING")
    return env


def run_cli(
    app: Path, guard_dir: Path, *, importable: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Exit status and output of `python -m runtime app` from the repo root; `importable` joins the path."""
    return subprocess.run(
        [sys.executable, "-m", "runtime", str(app)],
        cwd=REPO, env=cli_environment(guard_dir, importable), capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip


# Reads one run a line from stdin; each runs in a child forked from this process, which imported the runtime
# once, and leaves the loop to run `runtime` as `python -m runtime` would: its exit, a SystemExit or an
# uncaught exception, is the interpreter's own. The parent answers each line with the child's exit status,
# having killed a child still running after the run's timeout.
_FORKING_CLI = """
import json
import os
import runpy
import signal
import sys
import time

import runtime.cli


def exit_status(child, timeout):
    deadline = time.monotonic() + timeout
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
        time.sleep(0.005)


def next_run():
    for line in sys.stdin:
        run = json.loads(line)
        child = os.fork()
        if child == 0:
            return run
        sys.stdout.write(f"{exit_status(child, run['timeout'])}\\n")
        sys.stdout.flush()
    return None


run = next_run()
if run is not None:
    for fd, name, flags in ((0, os.devnull, os.O_RDONLY), (1, run["stdout"], os.O_WRONLY | os.O_TRUNC),
                            (2, run["stderr"], os.O_WRONLY | os.O_TRUNC)):
        os.dup2(os.open(name, flags), fd)
    os.environ.clear()
    os.environ.update(run["env"])
    sys.path[2:2] = run["path"]  # after the working directory and the guard, as PYTHONPATH puts it
    sys.argv = ["-m", *run["argv"]]
    runpy.run_module("runtime", run_name="__main__", alter_sys=True)
"""


class ForkingCli:
    """`python -m runtime` runs that each take a process of their own, as run_cli's do, with the same
    environment, path and guard, but forked from one that has imported the runtime: a run costs a fork
    rather than an interpreter's start and the runtime's imports."""

    def __init__(self, guard_dir: Path) -> None:
        self.guard_dir = guard_dir
        self.outputs = Path(tempfile.mkdtemp(prefix="forking-cli-"))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _FORKING_CLI], cwd=REPO, env=cli_environment(guard_dir),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests: IO[str] = self.process.stdin
        self.statuses: IO[str] = self.process.stdout

    def __enter__(self) -> ForkingCli:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def run(
        self, app: Path, *, importable: Path | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """What run_cli(app, guard_dir, importable=importable) returns; a run past `timeout` is killed (-9)."""
        stdout, stderr = self.outputs / "stdout", self.outputs / "stderr"
        for output in (stdout, stderr):
            output.write_text("")
        env = cli_environment(self.guard_dir, importable)
        path = [str(importable)] if importable is not None else []
        request = {"argv": [str(app)], "env": env, "path": path, "stdout": str(stdout), "stderr": str(stderr),
                   "timeout": timeout}  # fmt: skip
        self.requests.write(json.dumps(request) + "\n")
        self.requests.flush()
        status = self.statuses.readline()
        assert status, "the forking runner stopped"
        return subprocess.CompletedProcess(
            ["python", "-m", "runtime", str(app)], int(status), stdout.read_text(), stderr.read_text()
        )

    def close(self) -> None:
        self.requests.close()
        self.process.wait(30)
        self.statuses.close()
        for output in self.outputs.iterdir():
            output.unlink()
        self.outputs.rmdir()
