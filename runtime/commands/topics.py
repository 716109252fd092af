"""`python -m runtime topics list|describe|create`: what the broker holds, and the app's topics made."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from runtime.commands.app_topics import app_topics
from runtime.commands.cluster import Cluster, add_app_option, connect
from runtime.commands.log_dirs import partition_sizes
from runtime.commands.running import command_parser, run
from runtime.kafka.topics import describe_partitions, ensure_topics

SET_ON_THE_TOPIC = 1  # DescribeConfigs' config source DYNAMIC_TOPIC_CONFIG: not a broker default

EPILOG = """\
examples:
  python -m runtime topics list
  python -m runtime topics describe --app app.yaml            # the app's topics
  python -m runtime topics describe orders --json
  python -m runtime topics create --app app.yaml              # declared topics, changelogs, dead letters
"""


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start_offset: int
    end_offset: int
    bytes: int | None


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the broker has it; `records` is end minus start offset summed, an upper bound where
    transaction markers or compaction leave gaps."""

    topic: str
    exists: bool
    partitions: int = 0
    replication_factor: int = 0
    configs: dict[str, str] = field(default_factory=dict)
    records: int = 0
    bytes: int | None = None
    partition_details: list[PartitionInfo] = field(default_factory=list)


async def describe(cluster: Cluster, admin: AIOKafkaAdminClient, topics: list[str]) -> list[TopicInfo]:
    described = {entry["topic"]: entry for entry in await admin.describe_topics(topics)}
    present = [topic for topic in topics if described[topic]["error_code"] == 0]
    leaders = {
        (topic, entry["partition"]): entry["leader"]
        for topic in present
        for entry in described[topic]["partitions"]
        if entry["leader"] >= 0
    }
    if not present:
        return [TopicInfo(topic, exists=False) for topic in topics]
    partitions = [TopicPartition(topic, partition) for topic, partition in sorted(leaders)]
    consumer = cluster.consumer(group_id=None, isolation_level="read_uncommitted")
    await consumer.start()
    try:
        starts = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    client = cluster.client()
    await client.bootstrap()
    try:
        sizes = await partition_sizes(client, leaders)
    finally:
        await client.close()
    configs = await _configs_set_on(admin, present)
    return [
        _topic_info(topic, described[topic], configs.get(topic, {}), starts, ends, sizes)
        if topic in present
        else TopicInfo(topic, exists=False)
        for topic in topics
    ]


def _topic_info(
    topic: str,
    described: dict[str, Any],
    configs: dict[str, str],
    starts: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    sizes: dict[tuple[str, int], int],
) -> TopicInfo:
    details = [
        PartitionInfo(
            partition=entry["partition"],
            leader=entry["leader"],
            replicas=entry["replicas"],
            isr=entry["isr"],
            start_offset=starts.get(TopicPartition(topic, entry["partition"]), 0),
            end_offset=ends.get(TopicPartition(topic, entry["partition"]), 0),
            bytes=sizes.get((topic, entry["partition"])),
        )
        for entry in sorted(described["partitions"], key=lambda entry: int(entry["partition"]))
    ]
    known_sizes = [detail.bytes for detail in details if detail.bytes is not None]
    return TopicInfo(
        topic,
        exists=True,
        partitions=len(details),
        replication_factor=max((len(detail.replicas) for detail in details), default=0),
        configs=configs,
        records=sum(detail.end_offset - detail.start_offset for detail in details),
        bytes=sum(known_sizes) if len(known_sizes) == len(details) else None,
        partition_details=details,
    )


async def _configs_set_on(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
    configs: dict[str, dict[str, str]] = {}
    for response in await admin.describe_configs(resources) if resources else []:
        for _, _, _, topic, entries in response.resources:
            configs[topic] = {entry[0]: entry[1] for entry in entries if entry[3] == SET_ON_THE_TOPIC}
    return configs


def render(info: TopicInfo) -> str:
    if not info.exists:
        return f"{info.topic}: does not exist"
    size = "size unknown" if info.bytes is None else _bytes(info.bytes)
    lines = [
        f"{info.topic}: {info.partitions} partition{'s' if info.partitions != 1 else ''}, replication factor "
        f"{info.replication_factor}, {info.records:,} records, {size}"
    ]
    if info.configs:
        lines.append("  configs: " + ", ".join(f"{name}={value}" for name, value in sorted(info.configs.items())))
    rows = [("partition", "leader", "replicas", "isr", "start", "end", "bytes"), *map(_row, info.partition_details)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines += [
        "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def _row(detail: PartitionInfo) -> tuple[str, ...]:
    replicas, isr = ",".join(map(str, detail.replicas)), ",".join(map(str, detail.isr))
    size = "?" if detail.bytes is None else str(detail.bytes)
    return (
        str(detail.partition),
        str(detail.leader),
        replicas,
        isr,
        str(detail.start_offset),
        str(detail.end_offset),
        size,
    )


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


async def run_action(cluster: Cluster, args: argparse.Namespace) -> int:
    admin = cluster.admin()
    await admin.start()
    try:
        if args.action == "list":
            names: list[str] = await admin.list_topics()
            print("\n".join(sorted(name for name in names if args.all or not name.startswith("__"))))
        elif args.action == "describe":
            infos = await describe(cluster, admin, args.topics or await _default_topics(cluster, admin))
            if args.json:
                print(json.dumps([asdict(info) for info in infos], indent=2))
            else:
                print("\n\n".join(render(info) for info in infos))
        else:
            await _create(cluster, admin)
    finally:
        await admin.close()
    return 0


async def _default_topics(cluster: Cluster, admin: AIOKafkaAdminClient) -> list[str]:
    """The app's topics, else every topic but Kafka's internal ones."""
    if cluster.app is not None:
        return app_topics(cluster.app)
    names: list[str] = await admin.list_topics()
    return sorted(name for name in names if not name.startswith("__"))


async def _create(cluster: Cluster, admin: AIOKafkaAdminClient) -> None:
    assert cluster.app is not None, "--app is required"
    wanted = app_topics(cluster.app)
    before = await describe_partitions(admin, wanted)
    counts = await ensure_topics(admin, cluster.app.model_copy(update={"create_topics": True}))
    for topic in wanted:
        verb = "exists " if topic in before else "created"
        print(f"{verb} {topic} ({counts[topic]} partition{'s' if counts[topic] != 1 else ''})")


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "topics",
        "List and describe the broker's topics, or create an app's.",
        EPILOG,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="list|describe|create")
    listing = actions.add_parser("list", help="the topics' names", description="Print the topics' names.")
    listing.add_argument("--all", action="store_true", help="Kafka's internal topics too (__consumer_offsets, ...)")
    describing = actions.add_parser(
        "describe",
        help="partitions, leaders and replicas, configs set on the topic, offsets and sizes",
        description="Describe topics: partitions, leaders and replicas, the configs set on each topic, offsets "
        "and sizes on disk.",
    )
    describing.add_argument("topics", nargs="*", help="default: the app's topics, else every topic")
    describing.add_argument("--json", action="store_true", help="as JSON")
    creating = actions.add_parser(
        "create",
        help="the app's topics as its YAML declares them, its changelogs and dead-letter topic",
        description="Create what the app needs before it runs, as its start does: its topics as its YAML declares "
        "them, its stores' changelogs and its dead-letter topic. Prints 'created' or 'exists' for each.",
    )
    for action in (listing, describing):
        add_app_option(action)
    add_app_option(creating, required=True)
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return run(args.app, lambda: asyncio.run(run_action(connect(args.app), args)))
