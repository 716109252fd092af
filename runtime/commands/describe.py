"""`python -m runtime describe app.yaml`: the app's topology as its YAML declares it, without a broker; with
`--standbys`, also where the group keeps its standby stores and how far behind they are."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.commands.app_topics import changelog_topics
from runtime.commands.cluster import connect
from runtime.commands.running import command_parser, run
from runtime.commands.standby_lags import render_lags, standby_lags
from runtime.config import AppConfig, ErrorPolicy, ProcessorConfig, load_app
from stores.replication import BROKER_DEFAULT


@dataclass(frozen=True)
class Input:
    topic: str
    partitions: int
    written_by: list[str]  # processors of this app that write it; none: a source


@dataclass(frozen=True)
class Output:
    topic: str
    read_by: list[str]  # processors of this app that read it; none: a sink


@dataclass(frozen=True)
class Store:
    name: str
    backend: str
    changelog: str | None
    key_serde: str
    value_serde: str


@dataclass(frozen=True)
class Table:
    """A compacted topic co-partitioned with the inputs, mirrored into a store of each task."""

    store: str
    topic: str
    backend: str
    history_ms: int | None = None


@dataclass(frozen=True)
class ProcessorNode:
    """One processor: a task per partition of its inputs, which are co-partitioned when there are several
    (partition N of each goes to task N)."""

    name: str
    class_path: str
    tasks: int
    co_partitioned: bool
    inputs: list[Input]
    broadcast: list[Input]  # read whole by every task, each at its own position
    tables: list[Table]
    outputs: list[Output]
    stores: list[Store]


@dataclass(frozen=True)
class GlobalStoreNode:
    """A topic every worker reads whole: broadcast to every task of every processor."""

    name: str
    topic: str
    backend: str
    key_serde: str
    value_serde: str
    updater: str | None


@dataclass(frozen=True)
class InternalTopic:
    """A topic the runtime names after the app, created with `internal_topics`."""

    topic: str
    purpose: str
    partitions: int
    replication_factor: int  # -1: the broker's default.replication.factor


@dataclass(frozen=True)
class Topology:
    app_id: str
    group: str
    guarantee: str
    standby_replicas: int  # other workers keeping each stateful task's RocksDB stores warm
    processors: list[ProcessorNode]
    global_stores: list[GlobalStoreNode]
    internal_topics: list[InternalTopic]


def topology(app: AppConfig) -> Topology:
    writers = {topic: [p.name for p in app.processors if topic in p.outputs] for topic in app.topics}
    readers = {topic: [p.name for p in app.processors if topic in p.inputs] for topic in app.topics}
    processors = [
        ProcessorNode(
            name=processor.name,
            class_path=processor.class_path,
            tasks=app.topics[processor.inputs[0]].partitions,
            co_partitioned=len(processor.inputs) + len(processor.tables) > 1,
            inputs=[Input(topic, app.topics[topic].partitions, writers[topic]) for topic in processor.inputs],
            broadcast=[Input(topic, app.topics[topic].partitions, writers[topic]) for topic in processor.broadcast],
            tables=[
                Table(name, table.topic, table.backend, table.history_ms) for name, table in processor.tables.items()
            ],
            outputs=[Output(topic, readers[topic]) for topic in processor.outputs],
            stores=_stores(app, processor),
        )
        for processor in app.processors
    ]
    global_stores = [
        GlobalStoreNode(name, spec.topic, spec.backend, spec.key_serde, spec.value_serde, spec.updater)
        for name, spec in app.global_stores.items()
    ]
    internal = _internal_topics(app, {processor.name: processor.tasks for processor in processors})
    return Topology(
        app.app_id, app.group_id, app.guarantee.value, app.standby_replicas, processors, global_stores, internal
    )


def _internal_topics(app: AppConfig, tasks: dict[str, int]) -> list[InternalTopic]:
    replicas = app.internal_topics.replication_factor
    owners = {store: processor.name for processor in app.processors for store in processor.stores}
    internal = [
        InternalTopic(topic, f"changelog of store {store} (compacted)", tasks[owners[store]], replicas)
        for topic, store in changelog_topics(app).items()
    ]
    internal += [
        InternalTopic(
            p.repartition_topic,
            f"repartition: the inputs of {p.name}, re-keyed (purged once read)",
            app.topics[p.repartition_topic].partitions,
            app.topics[p.repartition_topic].replication_factor,
        )
        for p in app.processors
        if p.repartition_topic is not None
    ]
    dead_letters = ErrorPolicy.DEAD_LETTER in (app.errors.deserialization, app.errors.processing) or any(
        spec.errors == "dead_letter" for spec in app.global_stores.values()
    )
    if dead_letters:
        spec = app.topics[app.dead_letter_topic]
        internal.append(InternalTopic(app.dead_letter_topic, "dead letters", spec.partitions, spec.replication_factor))
    internal += [
        InternalTopic(app.outbox_position_topic(name), f"position of outbox {name} (compacted)", 1, replicas)
        for name in app.outboxes
    ]
    internal += [
        InternalTopic(app.follower_position_topic(name), f"position of table follower {name} (compacted)", 1, replicas)
        for name in app.table_followers
    ]
    if app.outboxes or app.table_followers:
        what = "elects the one process that runs each outbox and table follower"
        internal.append(InternalTopic(app.singletons_topic(), what, 1, replicas))
    return internal


def _stores(app: AppConfig, processor: ProcessorConfig) -> list[Store]:
    return [
        Store(
            name, spec.backend, app.changelog_topic(name) if spec.changelog else None, spec.key_serde, spec.value_serde
        )
        for name, spec in processor.stores.items()
    ]


def render(topology: Topology) -> str:
    standbys = f", {_count(topology.standby_replicas, 'standby replica')}" if topology.standby_replicas else ""
    lines = [f"app {topology.app_id}: consumer group {topology.group}, {topology.guarantee}{standbys}"]
    for processor in topology.processors:
        lines += ["", f"processor {processor.name} ({processor.class_path}): {_count(processor.tasks, 'task')}"]
        inputs = ", ".join(f"{i.topic}{_peers('from', i.written_by)}" for i in processor.inputs)
        each = " each, co-partitioned" if processor.co_partitioned else ""
        lines.append(f"  reads   {inputs}: {_count(processor.tasks, 'partition')}{each}")
        for broadcast in processor.broadcast:
            lines.append(
                f"  reads   {broadcast.topic}{_peers('from', broadcast.written_by)}: broadcast, every task "
                f"reads its {_count(broadcast.partitions, 'partition')} at its own position"
            )
        for table in processor.tables:
            lines.append(
                f"  table   {table.topic} into store {table.store} ({table.backend}), co-partitioned; "
                "the topic is its changelog"
                + ("" if table.history_ms is None else f"; keeps {table.history_ms} ms of history")
            )
        for output in processor.outputs:
            lines.append(f"  writes  {output.topic}{_peers('to', output.read_by)}")
        for store in processor.stores:
            changelog = f"changelog {store.changelog}" if store.changelog else "no changelog"
            lines.append(f"  store   {store.name}: {store.backend}, {changelog}, {_serdes(store)}")
    if topology.global_stores:
        lines += ["", "global stores (each worker reads the whole topic; every task sees it):"]
        for spec in topology.global_stores:
            updater = f", updater {spec.updater}" if spec.updater else ""
            lines.append(f"  {spec.name}: topic {spec.topic}, {spec.backend}, {_serdes(spec)}{updater}")
    if topology.internal_topics:
        width = max(len(topic.topic) for topic in topology.internal_topics)
        lines += ["", "topics named after the app:"]
        lines += [
            f"  {topic.topic:<{width}}  {topic.purpose}, {_count(topic.partitions, 'partition')}, "
            f"{_replicas(topic.replication_factor)}"
            for topic in topology.internal_topics
        ]
    return "\n".join(lines)


def _replicas(factor: int) -> str:
    return "the broker's default replication factor" if factor == BROKER_DEFAULT else f"replication factor {factor}"


def _serdes(store: Store | GlobalStoreNode) -> str:
    return f"keys {store.key_serde}, values {store.value_serde}"


def _peers(direction: str, processors: list[str]) -> str:
    return f" ({direction} {', '.join(processors)})" if processors else ""


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "describe",
        "The app's topology as its YAML declares it (partition counts too): its processors, "
        "what they read (co-partitioned inputs; broadcast inputs and global stores, read whole by every task) "
        "and write, their "
        "stores and changelogs, and the topics named after the app. It connects to nothing, unless asked for the "
        "standbys.",
    )
    parser.add_argument("app", type=Path, help="the app's YAML file")
    parser.add_argument("--json", action="store_true", help="as JSON")
    parser.add_argument(
        "--standbys",
        action="store_true",
        help="also, from the app's running group: which worker keeps which task's stores warm, and how far behind "
        "(this connects to the app's broker)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        app = load_app(args.app)
        described = topology(app)
        lags = asyncio.run(standby_lags(connect(args.app), app)) if args.standbys else None
        if args.json:
            shown = asdict(described) | ({} if lags is None else {"standbys": [asdict(lag) for lag in lags]})
            print(json.dumps(shown, indent=2))
        else:
            print(render(described) + ("" if lags is None else "\n\n" + render_lags(lags)))
        return 0

    return run(args.app, body)
