"""Run the runtime as users do: an app YAML in a file and `python -m runtime app.yaml` in a subprocess."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", re.MULTILINE)
# The runtime's log format: date, time, level, logger, [pid], message. Loggers are named after modules, which move.
LOG_MESSAGE = re.compile(r"^\S+ \S+ \S+ \S+ \[\d+\] (.*)")
RATE_IN_LOG = re.compile(r"([0-9][0-9,_]*(?:\.[0-9]+)?)\s*(?:records|recs|msgs?)\s*/\s*s", re.IGNORECASE)


@dataclass(frozen=True)
class AppSpec:
    """One input topic, one output topic, one processor between them (with its `stores:`, if any)."""

    app_id: str
    bootstrap: str
    input_topic: str
    output_topic: str
    partitions: int
    processor_class: str
    params: dict[str, Any] = field(default_factory=dict)
    guarantee: str = "at_least_once"
    extra: dict[str, Any] = field(default_factory=dict)
    processor_name: str = "transform"
    stores: dict[str, Any] = field(default_factory=dict)
    value_serde: str = "msgpack"
    concurrency: dict[str, Any] | None = None  # the processor's `concurrency:`, when set

    def to_yaml(self) -> dict[str, Any]:
        topic = {"partitions": self.partitions, "key_serde": "str", "value_serde": self.value_serde}
        processor: dict[str, Any] = {
            "name": self.processor_name,
            "class": self.processor_class,
            "inputs": [self.input_topic],
            "outputs": [self.output_topic],
            "params": {"output": self.output_topic, **self.params},
        }
        if self.stores:
            processor["stores"] = self.stores
        if self.concurrency:
            processor["concurrency"] = self.concurrency
        return {
            "app_id": self.app_id,
            "kafka": {"bootstrap_servers": self.bootstrap},
            "topics": {self.input_topic: topic, self.output_topic: topic},
            "processors": [processor],
            "guarantee": self.guarantee,
            **self.extra,
        }

    def write(self, directory: Path) -> Path:
        path = directory / f"{self.app_id}.yaml"
        path.write_text(yaml.safe_dump(self.to_yaml(), sort_keys=False))
        return path


def children_cpu_seconds() -> float:
    """User + system CPU time of this process's children (and theirs) that have exited and been waited for.

    One runtime process runs at a time, so its CPU time is the difference across its `wait`: a figure
    that other load on the machine barely moves, unlike the wall clock.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class LoggedProcess:
    """A benchmarked subprocess: its output captured in `log_path`, its wall clock, CPU time and peak RSS measured."""

    def __init__(self, command: list[str], log_path: Path, cwd: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self.started = time.perf_counter()
        self._children_cpu_before = children_cpu_seconds()
        self.cpu_seconds: float | None = None
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.finished: float | None = None
        self.peak_rss = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit by itself; kill it and raise if it takes longer than `timeout`."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(
                f"{self.log_path.stem} did not finish within {timeout:.0f}s; log: {self.log_path}"
            ) from None
        self.finished = time.perf_counter()
        self.cpu_seconds = children_cpu_seconds() - self._children_cpu_before
        return code

    def wait_sampling_rss(self, timeout: float, interval: float = 0.1) -> int:
        """`wait`, while a thread samples the RSS of the process tree every `interval` seconds into `peak_rss`."""
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                self.peak_rss = max(self.peak_rss, tree_rss(self.pid))
                done.wait(interval)

        sampler = threading.Thread(target=sample, name="rss sampler", daemon=True)
        sampler.start()
        try:
            return self.wait(timeout)
        finally:
            done.set()
            sampler.join()

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, as a deployment stops it; SIGKILL if it does not exit within `timeout`."""
        if self.running():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except RuntimeError:
            return -signal.SIGKILL

    @property
    def wall_seconds(self) -> float:
        end = self.finished if self.finished is not None else time.perf_counter()
        return end - self.started

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


class RuntimeProcess(LoggedProcess):
    """`python -m runtime app.yaml [args]` with its output captured in a log file next to the YAML."""

    def __init__(self, app_yaml: Path, *args: str, profile: bool = False, tree: Path = REPO_ROOT) -> None:
        """With `profile`, the runtime runs under cProfile, which writes `profile_path` (`.prof` next to the log).

        `tree` is the source tree whose runtime runs (another commit exported, to compare with it).
        """
        self.profile_path = app_yaml.with_suffix(".prof") if profile else None
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": python_path(tree)}
        profiler = ["-m", "cProfile", "-o", str(self.profile_path)] if self.profile_path else []
        command = [sys.executable, *profiler, "-m", "runtime", str(app_yaml), *args]
        super().__init__(command, app_yaml.with_suffix(".log"), tree, env)

    def timed_lines(self) -> Iterator[tuple[datetime, str]]:
        """The log lines that start with a timestamp, with it parsed (millisecond resolution)."""
        for line in self.log().splitlines():
            stamp = LOG_TIME.match(line)
            if stamp is not None:
                yield datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f"), line

    def logged_span(self, first: str, last: str) -> float | None:
        """Seconds between the first log message starting with `first` and the last one starting with `last`.

        Only the messages count, not the logger names, so that commits whose modules differ compare.
        """
        times: dict[str, datetime] = {}
        for when, line in self.timed_lines():
            found = LOG_MESSAGE.match(line)
            message = found.group(1) if found is not None else ""
            if message.startswith(first) and first not in times:
                times[first] = when
            if message.startswith(last):
                times[last] = when
        if first not in times or last not in times:
            return None
        return (times[last] - times[first]).total_seconds()

    def logged_rate(self) -> float | None:
        """The last `N records/s` figure the runtime logged, if it logs one."""
        found = RATE_IN_LOG.findall(self.log())
        if not found:
            return None
        return float(found[-1].replace(",", "").replace("_", ""))


def python_path(tree: Path) -> str:
    """`tree`, then the inherited PYTHONPATH but this repository: another tree lacks none of its modules."""
    inherited = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    return os.pathsep.join([str(tree), *(entry for entry in inherited if Path(entry).resolve() != REPO_ROOT)])


def tree_rss(pid: int) -> int:
    """RSS of the process and its children (the runtime may start worker processes)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += int(process.memory_info().rss)
        except psutil.NoSuchProcess:
            continue
    return total


@dataclass(frozen=True)
class DiskUsage:
    """A directory tree's files: the bytes they hold, and the bytes allocated for them (as `du` counts)."""

    files: int
    file_bytes: int
    allocated_bytes: int


def disk_usage(directory: Path) -> DiskUsage:
    files = file_bytes = allocated = 0
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            files += 1
            file_bytes += stat.st_size
            allocated += stat.st_blocks * 512
    return DiskUsage(files, file_bytes, allocated)
