"""Several local Kafka nodes on 127.0.0.1 that form one cluster, each with its own ports and data dir."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from runtime.devkafka.broker import LocalBroker, free_ports
from runtime.devkafka.secured import Security


@dataclass
class LocalCluster:
    """`size` nodes, each a broker and a voter of the KRaft quorum; secured alike when `security` is given."""

    data_dir: Path
    size: int = 3
    security: Security | None = None
    heap: str = "512m"
    nodes: list[LocalBroker] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.nodes:
            return
        controller_ports = free_ports(self.size)
        voters = ",".join(f"{index + 1}@127.0.0.1:{port}" for index, port in enumerate(controller_ports))
        cluster_id = uuid.uuid4().hex[:22]
        self.nodes = [
            LocalBroker(
                data_dir=self.data_dir / f"node-{index + 1}",
                controller_port=port,
                heap=self.heap,
                node_id=index + 1,
                quorum_voters=voters,
                cluster_id=cluster_id,
                cluster_size=self.size,
                security=self.security,
            )
            for index, port in enumerate(controller_ports)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return self.address("PLAINTEXT")

    def address(self, listener: str) -> str:
        """Every node's address on the named listener, comma-separated, as clients take them."""
        return ",".join(node.address(listener) for node in self.nodes)

    def start(self, timeout: float = 120.0, detach: bool = False) -> None:
        """Start every node, then wait until each answers: none can be ready before a quorum of them runs."""
        try:
            for node in self.nodes:
                node.launch(detach)
            for node in self.nodes:
                node.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> LocalCluster:
        """Started, for a `with` block that stops it at its end (a test's fixture)."""
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """All nodes at once: one by one, the last would wait for a quorum that is gone."""
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            list(pool.map(lambda node: node.stop(timeout), self.nodes))
