"""Faults of the brokers of a local cluster (`runtime/devkafka/cluster.py`): which broker leads what, a broker
killed (-9), stopped and wiped, and the waits for the cluster to be whole again."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections import Counter
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from runtime.devkafka import LocalBroker
from runtime.devkafka.cluster import LocalCluster


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: frozenset[int]
    in_sync: frozenset[int]


async def create_replicated(
    bootstrap: str, topic: str, partitions: int, replicas: list[int], configs: dict[str, str]
) -> None:
    """Every partition on `replicas` in that order: the first leads them all while it is in sync."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        assignment = dict.fromkeys(range(partitions), replicas)
        await admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment, topic_configs=configs)])
    finally:
        await admin.close()


async def partition_states(bootstrap: str, topics: list[str] | None = None) -> list[PartitionState]:
    """Each partition's leader, replicas and in-sync replicas, from the metadata (every topic by default)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    return [
        PartitionState(
            topic["topic"], part["partition"], part["leader"], frozenset(part["replicas"]), frozenset(part["isr"])
        )
        for topic in described
        for part in topic["partitions"]
    ]


async def leading_most(bootstrap: str, topics: list[str]) -> int:
    """The broker that leads the most partitions of `topics` (the lowest id of those that lead as many)."""
    leaders = Counter(state.leader for state in await partition_states(bootstrap, topics) if state.leader >= 0)
    most = max(leaders.values())
    return min(broker for broker, count in leaders.items() if count == most)


async def roles(bootstrap: str, broker: int, topics: list[str], group: str, transactional_ids: list[str]) -> str:
    """What `broker` does for an app, for the log: the partitions it leads, and which coordinators it is."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        led = [state for state in await partition_states(bootstrap, topics) if state.leader == broker]
        await admin.start()
        group_coordinator = await admin.find_coordinator(group)
        transactions = [await admin.find_coordinator(each, coordinator_type=1) for each in transactional_ids]
    except KafkaError as error:
        return f"its roles unknown: {error!r}"
    finally:
        await admin.close()
    return (
        f"leads {len(led)} partitions of {', '.join(topics)}; coordinates "
        f"{'the group and ' if group_coordinator == broker else ''}"
        f"{transactions.count(broker)} of {len(transactions)} transactional ids"
    )


async def until_fully_replicated(bootstrap: str, timeout: float = 180) -> None:
    """Every partition of every topic has all its replicas in sync: the cluster can lose a broker again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lagging = [state for state in await partition_states(bootstrap) if state.in_sync != state.replicas]
        except KafkaError as error:
            lagging = [PartitionState(f"(metadata: {error!r})", -1, -1, frozenset(), frozenset())]
        if not lagging:
            return
        assert time.monotonic() < deadline, f"still short of replicas after {timeout:.0f} s: {lagging[:5]}"
        await asyncio.sleep(0.5)


def node(cluster: LocalCluster, broker: int) -> LocalBroker:
    return next(each for each in cluster.nodes if each.node_id == broker)


def kill(broker: LocalBroker) -> None:
    """SIGKILL: no controlled shutdown, so its partitions lose their leader until the controller notices."""
    assert broker.process is not None, f"broker {broker.node_id} is not running"
    broker.process.kill()
    broker.process.wait()
    broker.process = None


def wipe(broker: LocalBroker) -> None:
    """Stop it (a controlled shutdown) and delete its log directory, metadata log and `meta.properties` too:
    its next start formats the storage again with the cluster's id and its own node id, as a node given a
    new disk is, and it fetches the metadata and every replica it holds from the others."""
    broker.stop()
    shutil.rmtree(broker.data_dir / "log")
