"""The five peers: how each one is installed, started on a workload, and what settings it runs with."""

from __future__ import annotations

import json
import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiokafka

from bench import bare_loop
from bench.app import REPO_ROOT, AppSpec, LoggedProcess, RuntimeProcess, python_path
from bench.data import BATCH_BYTES
from bench.peers import environments
from bench.peers.inputs import Input
from bench.peers.peer_args import AWAIT_IN_FLIGHT, AWAIT_MS, SETTINGS_PREFIX
from bench.peers.workloads import AWAIT, COUNT, TRANSFORM, WINDOW, WINDOW_AGGREGATIONS, WINDOW_EARLY, Workload
from bench.regression import git
from bench.stateful import count_store
from bench.windows import WINDOW_STORE, WINDOWS, window_count
from runtime.devkafka import kafka_version


@dataclass(frozen=True)
class Run:
    """What one peer process gets: the input, a fresh output topic, group (application id) and state directory."""

    bootstrap: str
    workload: Workload
    source: Input
    input_topic: str
    output_topic: str
    group: str
    state_dir: Path
    outputs: int  # how many records a correct peer writes
    workdir: Path  # the invocation's result directory: logs, app YAMLs

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.group}.log"

    def app_arguments(self) -> list[str]:
        """The command line of `bench.peers.peer_args`."""
        return [
            "--bootstrap", self.bootstrap,
            "--input", self.input_topic,
            "--output", self.output_topic,
            "--group", self.group,
            "--state-dir", str(self.state_dir),
            "--workload", self.workload.kind,
            "--guarantee", self.workload.guarantee,
            "--partitions", str(self.source.partitions),
            "--records", str(self.source.records),
            "--outputs", str(self.outputs),
        ]  # fmt: skip


class Peer(ABC):
    """One stream processor under comparison."""

    name: str

    def prepare(self) -> None:
        """Install or build what it needs (once; later calls find it done)."""
        return None

    @abstractmethod
    def version(self) -> str: ...

    def skips(self, workload: Workload) -> str | None:
        """Why it does not run `workload`, or None when it does."""
        return None

    @abstractmethod
    def start(self, run: Run) -> LoggedProcess: ...

    def settings(self, run: Run, process: LoggedProcess) -> dict[str, Any]:
        """The settings it ran with, as its app printed them (`peer_args.announce`)."""
        for line in process.log().splitlines():
            if line.startswith(SETTINGS_PREFIX):
                settings: dict[str, Any] = json.loads(line.removeprefix(SETTINGS_PREFIX))
                return settings
        return {}


@dataclass(frozen=True)
class RuntimeApp:
    """The runtime's processor for one workload kind: its class, name, `stores:` entry, `params` and
    `concurrency:` (None: one record at a time per partition, the default)."""

    processor_class: str
    processor_name: str
    stores: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    concurrency: dict[str, Any] | None = None


# The runtime's app per workload kind. The window is the built-in Aggregate processor as `bench.windows`
# runs it: its store (RocksDB, with a changelog) is declared by the processor itself. The await job is
# `bench.concurrency`'s `Lookup` (it sends the JSON value on with the field, as `Transform` does) with records
# of different keys in flight together, each key's in order.
RUNTIME_APPS: dict[str, RuntimeApp] = {
    TRANSFORM: RuntimeApp("bench.processors:Transform", "transform"),
    COUNT: RuntimeApp("bench.processors:CountPerKey", "count", count_store("rocksdb")),
    WINDOW: RuntimeApp("processors.windows:Aggregate", WINDOW_STORE, params=window_count(WINDOWS["tumbling"])),
    WINDOW_AGGREGATIONS: RuntimeApp(
        "processors.windows:Aggregate",
        WINDOW_STORE,
        params={
            "window": WINDOWS["tumbling"],
            "aggregations": {"n": {"type": "count"}, "total": {"type": "sum", "field": "id"}},
            "emit": "final",
        },
    ),
    # The input holds each key twice a window: after each record of it, so two early results a window.
    WINDOW_EARLY: RuntimeApp(
        "processors.windows:Aggregate",
        WINDOW_STORE,
        params={**window_count(WINDOWS["tumbling"]), "early": {"every_records": 1}},
    ),
    AWAIT: RuntimeApp(
        "bench.processors:Lookup",
        "lookup",
        params={"wait_ms": AWAIT_MS},
        concurrency={"max_in_flight": AWAIT_IN_FLIGHT, "order": "key"},
    ),
}


class Runtime(Peer):
    """This runtime: `python -m runtime app.yaml --until-caught-up`, the apps of `bench/processors.py` and the
    built-in windowed `Aggregate`."""

    name = "runtime"

    def version(self) -> str:
        return git("describe", "--always", "--dirty") or "unknown"

    def app(self, run: Run) -> AppSpec:
        app = RUNTIME_APPS[run.workload.kind]
        return AppSpec(
            app_id=run.group,
            bootstrap=run.bootstrap,
            input_topic=run.input_topic,
            output_topic=run.output_topic,
            partitions=run.source.partitions,
            processor_class=app.processor_class,
            params=app.params,
            guarantee=run.workload.guarantee,
            processor_name=app.processor_name,
            stores=app.stores,
            extra={"state_dir": str(run.state_dir)},
            value_serde="json",
            concurrency=app.concurrency,
        )

    def start(self, run: Run) -> LoggedProcess:
        return RuntimeProcess(self.app(run).write(run.workdir), "--until-caught-up")

    def settings(self, run: Run, process: LoggedProcess) -> dict[str, Any]:
        app = self.app(run)
        concurrency = {"concurrency": app.concurrency} if app.concurrency else {}
        return {
            "guarantee": app.guarantee,
            "key_serde": "str",
            "value_serde": app.value_serde,
            "processor": app.processor_class,
            "params": app.params,
            "stores": app.stores,
            **concurrency,
            "workers": 1,
            "args": "--until-caught-up",
        }


class BareLoop(Peer):
    """`bench/bare_loop.py` with `--serde json`: the stateless job as one hand-written aiokafka loop."""

    name = "bare"

    def version(self) -> str:
        return f"aiokafka {aiokafka.__version__}"

    def skips(self, workload: Workload) -> str | None:
        if workload.kind != TRANSFORM or workload.guarantee != "at_least_once":
            return "the bare loop does the stateless job at-least-once only"
        return None

    def start(self, run: Run) -> LoggedProcess:
        command = [sys.executable, "-m", "bench.bare_loop", "--bootstrap", run.bootstrap, "--input", run.input_topic]
        command += ["--output", run.output_topic, "--group", run.group, "--serde", "json"]
        return LoggedProcess(command, run.log_path, REPO_ROOT, child_environment())

    def settings(self, run: Run, process: LoggedProcess) -> dict[str, Any]:
        return {
            "serde": "json (orjson)",
            "getmany_max_records": bare_loop.MAX_RECORDS,
            "producer": {"acks": "all", "enable_idempotence": True, "max_batch_size": BATCH_BYTES},
            "commit": "after each getmany's outputs are acknowledged",
        }


class PythonPeer(Peer):
    """A Python library in its own virtualenv, running `bench.peers.<module>`; `lacks` says why it does not run
    a workload kind, for those its app does not do."""

    def __init__(self, name: str, module: str, package: str, lacks: dict[str, str] | None = None) -> None:
        self.name = name
        self._module = module
        self._package = package
        self._lacks = lacks or {}
        self._python: Path | None = None

    def prepare(self) -> None:
        self._python = environments.virtualenv_python(self.name)

    def version(self) -> str:
        return f"{self._package} {environments.pinned_version(self.name, self._package)}"

    def skips(self, workload: Workload) -> str | None:
        return self._lacks.get(workload.kind)

    def start(self, run: Run) -> LoggedProcess:
        if self._python is None:
            raise RuntimeError(f"{self.name} is not prepared")
        command = [str(self._python), "-m", self._module, *run.app_arguments()]
        return LoggedProcess(command, run.log_path, REPO_ROOT, child_environment())


class KafkaStreams(Peer):
    """`bench/peers/kafka_streams`, built by Maven with Kafka Streams at the broker's Kafka version."""

    name = "kafka-streams"

    def __init__(self) -> None:
        self._command: list[str] = []

    def prepare(self) -> None:
        self._command = environments.kafka_streams_command()

    def version(self) -> str:
        return f"kafka-streams {kafka_version()} on {environments.java_version()}"

    def skips(self, workload: Workload) -> str | None:
        if workload.kind == AWAIT:
            return "Kafka Streams processes one record at a time per task and has no async processing"
        return None

    def start(self, run: Run) -> LoggedProcess:
        if not self._command:
            raise RuntimeError(f"{self.name} is not prepared")
        return LoggedProcess([*self._command, *run.app_arguments()], run.log_path, REPO_ROOT, child_environment())


def reason_to_skip(peer: Peer, workload: Workload) -> str | None:
    """Why `peer` does not run `workload`: a variant of this runtime's own jobs is for this runtime alone."""
    if workload.compared_with is not None and peer.name != Runtime.name:
        return f"a variant of this runtime's {workload.compared_with} job, measured against it"
    return peer.skips(workload)


def child_environment() -> dict[str, str]:
    """The environment of a peer's process: this repository importable (`bench.peers.peer_args`), output unbuffered."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": python_path(REPO_ROOT)}


def all_peers() -> list[Peer]:
    return [
        Runtime(),
        PythonPeer(
            "quix",
            "bench.peers.quix_app",
            "quixstreams",
            {AWAIT: "Quix Streams processes one record at a time per partition and has no async processing"},
        ),
        PythonPeer("faust", "bench.peers.faust_app", "faust-streaming"),
        KafkaStreams(),
        BareLoop(),
    ]
