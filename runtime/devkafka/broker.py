"""An Apache Kafka node (KRaft, broker + controller) on 127.0.0.1, for development and tests: a
single node by default, or one node of a local cluster (`runtime/devkafka/cluster.py`)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaError

from runtime.devkafka.class_sharing import ClassSharing
from runtime.devkafka.jars import DevKafkaError, classpath, require_tool
from runtime.devkafka.secured import CLIENT_LISTENERS, INTERNAL, Security

# The group and transactional id whose coordinators are looked up to tell that the broker is ready.
READINESS_KEY = "dev-kafka-readiness"

# Single-node settings; the log cleaner is tuned so compaction is observable within a test, and sessions
# may be shorter than Kafka's 6 s minimum so that tests can move a killed worker's partitions on sooner.
# A node of a local cluster killed is fenced, and its partitions led by another, after 4 s without a
# heartbeat rather than Kafka's 9 s: on one machine a heartbeat is never late for the network.
CLUSTER_SETTINGS = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"}
SINGLE_NODE_SETTINGS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "10",
    "min.insync.replicas": "1",
    "default.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    # A killed worker's open transaction is aborted within a second of its timeout, not ten: the other
    # workers wait for that abort before they read its partitions' offsets.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "auto.create.topics.enable": "false",
    "log.cleaner.backoff.ms": "500",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.dedupe.buffer.size": "33554432",
    "log.cleaner.threads": "1",
    "num.partitions": "1",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each is held while the next is found, so none is handed out twice."""
    probes = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def port_is_free(port: int) -> bool:
    """No one listens on it. Connections of a stopped broker that linger in TIME_WAIT do not count:
    Kafka binds with SO_REUSEADDR, so a restart on the same port needs no wait."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def _cluster_ready(bootstrap_servers: str) -> bool:
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=2000)
    try:
        await client.bootstrap()
        if not client.cluster.brokers():
            return False
        for coordination in CoordinationType:
            await client.coordinator_lookup(coordination, READINESS_KEY)
        return True
    except (KafkaError, OSError):
        return False
    finally:
        await client.close()


def cluster_ready(bootstrap_servers: str) -> bool:
    """True when a broker answers, lists itself, and coordinates groups and transactions.

    The first lookup of a coordinator creates its internal topic (`__consumer_offsets`,
    `__transaction_state`); asked here, an app's first run does not meet them half-created and log
    `GroupCoordinatorNotAvailableError` and dead coordinators."""
    client_log = logging.getLogger("aiokafka")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)  # refused connections are expected while it boots
    try:
        return asyncio.run(_cluster_ready(bootstrap_servers))
    finally:
        client_log.setLevel(level)


@dataclass
class LocalBroker:
    """One KRaft broker process whose log and metadata live in `data_dir`.

    Alone by default; a node of a cluster is given its `node_id`, the cluster's `quorum_voters` and
    `cluster_id`, and its size. With `security`, it also opens the secured listeners of
    `runtime/devkafka/secured.py`, each on a port of its own (`secured_ports`)."""

    data_dir: Path
    port: int = 0
    controller_port: int = 0
    heap: str = "768m"
    node_id: int = 1
    quorum_voters: str = ""
    cluster_id: str = ""
    cluster_size: int = 1
    security: Security | None = None
    secured_ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _class_sharing: ClassSharing = field(default_factory=ClassSharing, init=False, repr=False)

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        if self.security is not None and not self.secured_ports:
            names = [*CLIENT_LISTENERS, INTERNAL]
            self.secured_ports = dict(zip(names, free_ports(len(names)), strict=True))

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def address(self, listener: str) -> str:
        """Where the named listener (`PLAINTEXT`, or one of `secured.CLIENT_LISTENERS`) is."""
        return self.bootstrap_servers if listener == "PLAINTEXT" else f"127.0.0.1:{self.secured_ports[listener]}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def _write_properties(self) -> Path:
        advertised = {"PLAINTEXT": self.port, **self.secured_ports}
        replicas = str(min(self.cluster_size, 3))
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.quorum_voters or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": ",".join(
                f"{name}://127.0.0.1:{port}"
                for name, port in {**advertised, "CONTROLLER": self.controller_port}.items()
            ),
            "advertised.listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in advertised.items()),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "log"),
            **SINGLE_NODE_SETTINGS,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "default.replication.factor": replicas,
            **(CLUSTER_SETTINGS if self.cluster_size > 1 else {}),
            **(self.security.settings(self.secured_ports) if self.security is not None else {}),
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path

    def _java(self, *args: str, sharing: list[str]) -> list[str]:
        log4j = resources.files("runtime.devkafka").joinpath("log4j2.yaml")
        return [
            require_tool("java"),
            *sharing,
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath(),
            *args,
        ]

    def _format_storage(self, properties: Path) -> None:
        if (self.data_dir / "log" / "meta.properties").exists():
            return
        cluster_id = self.cluster_id or uuid.uuid4().hex[:22]
        users = self.security.scram_arguments() if self.security is not None else []
        command = self._java(
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties), *users,
            sharing=[*self._class_sharing.mapping(), "-XX:TieredStopAtLevel=1"],  # short-lived: no optimising
        )  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise DevKafkaError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def start(self, timeout: float = 90.0, detach: bool = False) -> None:
        """Start the broker and return once it answers over the Kafka protocol."""
        self.launch(detach)
        self.wait_ready(timeout)

    def launch(self, detach: bool = False) -> None:
        """Start the process without waiting: the nodes of a cluster are ready only once a quorum runs."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for port in (self.port, self.controller_port, *self.secured_ports.values()):
            if not port_is_free(port):
                raise DevKafkaError(f"port {port} on 127.0.0.1 is already in use")
        properties = self._write_properties()
        self._format_storage(properties)
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                self._java(
                    "kafka.Kafka",
                    str(properties),
                    # A detached broker is stopped by another process, which would not put its archive in place.
                    sharing=self._class_sharing.mapping() if detach else self._class_sharing.mapping_or_dumping(),
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=detach,
            )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise DevKafkaError(f"Kafka exited during start-up:\n{self.log_tail()}")
            if cluster_ready(self.bootstrap_servers):
                return
            time.sleep(0.2)
        self.stop()
        raise DevKafkaError(f"Kafka was not ready within {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> LocalBroker:
        """Started, for a `with` block that stops it at its end (a test's fixture)."""
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None:
            return
        stop_process(self.process.pid, timeout)
        self.process.wait()
        self.process = None
        self._class_sharing.exited()


def stop_process(pid: int, timeout: float) -> None:
    """SIGTERM (Kafka's controlled shutdown), then SIGKILL if it does not exit in time."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def process_alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")
