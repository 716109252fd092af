"""`python -m runtime rewind app.yaml --to CHECKPOINT | --to-time T`: the app back to one of its checkpoints,
to process its inputs again from there with the code it runs now (a bug fixed, say).

Every worker of the app must be stopped (a group with active members is refused). Then:

1. The checkpoint: the one named, or the newest complete one named at or before the time. It is refused
   when an input offset it records lies below its partition's log start: retention deleted input it
   would need to process again.
2. The stores' changelogs are made to agree with it (runtime/rewind/changelog.py), so that a restore, from
   anything, ends with the checkpoint's state; and the checkpoint is carried forward to the changelog's
   new end, a snapshot named after the rewind that a store restores from without replaying the tail.
   The local stores are left as they are: behind that snapshot, they are loaded from it.
3. Each `PostgresSink`'s positions in its database move back with the group's offsets, so that it writes
   the records after the checkpoint again instead of skipping them (runtime/rewind/sinks.py).
4. The group's committed offsets move to the checkpoint's input offsets. An input partition no store
   covers (a stateless processor's) goes to its first record at or after the checkpoint's moment, and
   an intermediate topic no store covers to its end, as `reset` does.
5. The rewind is recorded, in the log and as a JSON record on `<app_id>-rewinds`.

The outputs of the records processed again repeat those sent the first time: see docs/rewind.md for
the ways to tell them apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from runtime.commands.app_topics import intermediate_topics
from runtime.commands.cluster import Cluster, CommandFailed, connect
from runtime.commands.positions import Position, offsets_at
from runtime.commands.reset import commit_offsets, require_stopped
from runtime.commands.running import command_parser, run
from runtime.commands.times import parse_time
from runtime.config import AppConfig
from runtime.kafka.topics import InternalTopic, describe_partitions, ensure_internal_topics
from runtime.rewind.catalog import AppCheckpoint, checkpoints
from runtime.rewind.changelog import Correction, append, corrections, ends
from runtime.rewind.sinks import SinkMove, database_sinks, move, planned_moves, rows_left_beside
from stores.checkpoint import carry_forward
from stores.snapshot_location import snapshot_key

log = logging.getLogger("runtime.rewind")

EPILOG = """\
examples:
  python -m runtime checkpoint app.yaml --list
  python -m runtime rewind app.yaml --to 20261126T070000Z --dry-run
  python -m runtime rewind app.yaml --to-time 2026-11-26T07:30:00Z
"""


@dataclass
class RewindPlan:
    checkpoint: AppCheckpoint
    group: str
    offsets: dict[TopicPartition, tuple[int | None, int]] = field(default_factory=dict)  # (committed now, new)
    corrections: dict[TopicPartition, list[Correction]] = field(default_factory=dict)
    sinks: list[SinkMove] = field(default_factory=list)
    sink_notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [
            f"rewind consumer group {self.group} to checkpoint {self.checkpoint.name} "
            f"(created {self.checkpoint.created_at.isoformat(timespec='seconds')})"
        ]
        for tp, (now, new) in sorted(self.offsets.items()):
            lines.append(f"  {tp.topic}[{tp.partition}]  {'none' if now is None else now} -> {new}")
        for tp, records in sorted(self.corrections.items()):
            tombstones = sum(1 for _, value in records if value is None)
            lines.append(
                f"  changelog {tp.topic}[{tp.partition}]: {len(records)} keys changed since, set back "
                f"({tombstones} of them deleted)"
            )
        if not self.corrections:
            lines.append("  the changelogs already agree with the checkpoint")
        lines += [planned.describe() for planned in self.sinks] + self.sink_notes
        return "\n".join(lines)

    def record(self) -> dict[str, Any]:
        return {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "checkpoint": self.checkpoint.name,
            "group": self.group,
            "offsets": {
                f"{tp.topic}[{tp.partition}]": {"from": now, "to": new}
                for tp, (now, new) in sorted(self.offsets.items())
            },
            "changelog_records": sum(len(records) for records in self.corrections.values()),
            "sinks": [planned.record() for planned in self.sinks],
        }


def rewinds_topic(app: AppConfig) -> str:
    return f"{app.app_id}-rewinds"


def chosen(app: AppConfig, name: str | None, before_ms: int | None) -> AppCheckpoint:
    found = checkpoints(app)
    if name is not None:
        for checkpoint in found:
            if checkpoint.name == name:
                return checkpoint
        known = ", ".join(checkpoint.name for checkpoint in found[-5:]) or "none"
        raise CommandFailed(f"no complete checkpoint {name} (the latest: {known})")
    assert before_ms is not None
    earlier = [c for c in found if c.moment.timestamp() * 1000 <= before_ms]
    if not earlier:
        raise CommandFailed("no complete checkpoint at or before that time")
    return earlier[-1]


async def plan(cluster: Cluster, app: AppConfig, checkpoint: AppCheckpoint) -> RewindPlan:
    planned = RewindPlan(checkpoint, app.group_id)
    admin = cluster.admin()
    await admin.start()
    consumer = cluster.consumer(group_id=None, isolation_level="read_committed")
    await consumer.start()
    try:
        inputs = sorted({topic for processor in app.processors for topic in processor.inputs})
        counts = await describe_partitions(admin, inputs)
        partitions = [TopicPartition(topic, p) for topic in inputs if topic in counts for p in range(counts[topic])]
        covered = checkpoint.input_offsets()
        beginnings = await consumer.beginning_offsets(list(covered)) if covered else {}
        gone = [
            f"{tp.topic}[{tp.partition}] starts at {beginnings[tp]}, the checkpoint at {offset}"
            for tp, offset in covered.items()
            if offset < beginnings[tp]
        ]
        if gone:
            raise CommandFailed(f"checkpoint {checkpoint.name} needs input that retention deleted: " + "; ".join(gone))
        rest = [tp for tp in partitions if tp not in covered]
        moment = Position("time", int(checkpoint.moment.timestamp() * 1000))
        intermediate = intermediate_topics(app)
        new = dict(covered)
        new |= await offsets_at(consumer, [tp for tp in rest if tp.topic not in intermediate], moment)
        new |= await offsets_at(consumer, [tp for tp in rest if tp.topic in intermediate], Position("end"))
        committed: dict[TopicPartition, Any] = await admin.list_consumer_group_offsets(app.group_id)
        for tp in partitions:
            now = committed[tp].offset if tp in committed and committed[tp].offset >= 0 else None
            planned.offsets[tp] = (now, new[tp])
        for store, manifest in checkpoint.manifests.items():
            storage = checkpoint.stores[store].snapshots.storage()
            key = snapshot_key(store, checkpoint.name)
            planned.corrections |= await corrections(consumer, storage, key, manifest)
        sinks = database_sinks(app)
        planned.sinks = await planned_moves(sinks, new)
        planned.sink_notes = rows_left_beside(sinks, intermediate)
    finally:
        await consumer.stop()
        await admin.close()
    return planned


async def rewind(cluster: Cluster, args: argparse.Namespace) -> int:
    app = _app(cluster)
    admin = cluster.admin()
    await admin.start()
    try:
        await require_stopped(admin, app.group_id, "rewind it")
    finally:
        await admin.close()
    planned = await plan(cluster, app, chosen(app, args.to, args.to_time))
    print(planned.describe())
    if args.dry_run:
        print("dry run: nothing was changed")
        return 0
    producer = cluster.producer()
    await producer.start()
    try:
        for tp, records in planned.corrections.items():  # 2, before the offsets: a rewind cut off here is done again
            await append(producer, tp, records)
        await _carry_forward(cluster, planned)
        await move(planned.sinks)  # 3, before the offsets: a sink's database out of reach leaves them as they were
        await commit_offsets(cluster, planned.group, {tp: new for tp, (_, new) in planned.offsets.items()})  # 4
        await _record(cluster, app, producer, planned)  # 5
    finally:
        await producer.stop()
    print("done")
    return 0


async def _carry_forward(cluster: Cluster, planned: RewindPlan) -> None:
    """Each store's checkpoint again, named after now, covering its changelog up to the end it now has."""
    moment = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    consumer = cluster.consumer(group_id=None, isolation_level="read_committed")
    await consumer.start()
    try:
        for store, manifest in planned.checkpoint.manifests.items():
            storage = planned.checkpoint.stores[store].snapshots.storage()
            source, target = snapshot_key(store, planned.checkpoint.name), snapshot_key(store, moment)
            if not storage.children(target):
                carry_forward(storage, source, target, await ends(consumer, manifest))
                where = storage.describe(target)
                print(f"  store {store}: the rewound state, to restore from without the changelog's tail: {where}")
    finally:
        await consumer.stop()


async def _record(cluster: Cluster, app: AppConfig, producer: Any, planned: RewindPlan) -> None:
    record = planned.record()
    log.warning("app %s rewound to checkpoint %s: %s", app.app_id, planned.checkpoint.name, json.dumps(record))
    admin = cluster.admin()
    await admin.start()
    try:
        await ensure_internal_topics(admin, app.internal_topics, [InternalTopic(rewinds_topic(app))])
    finally:
        await admin.close()
    await producer.send_and_wait(rewinds_topic(app), json.dumps(record).encode(), key=app.app_id.encode())


def _app(cluster: Cluster) -> AppConfig:
    assert cluster.app is not None, "rewind is given an app"
    return cluster.app


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "rewind", "Take a stopped app back to one of its checkpoints, to process its inputs again from there.", EPILOG
    )
    parser.add_argument("app", type=Path, help="the app's YAML file")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", metavar="CHECKPOINT", help="a checkpoint's name (python -m runtime checkpoint --list)")
    where.add_argument("--to-time", type=parse_time, metavar="TIME", help="the newest checkpoint at or before TIME")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, and change nothing")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return run(args.app, lambda: asyncio.run(rewind(connect(args.app), args)))
