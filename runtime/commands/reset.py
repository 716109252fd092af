"""`python -m runtime reset app.yaml`: the app's committed offsets moved, as Kafka's application reset tool
does, and optionally its local state and changelogs deleted, so that it processes its inputs again.

An intermediate topic (one processor's output, another's input) goes to its end whatever the target, as
with Kafka's tool: what is in it came from inputs that are processed again, which write it anew, so
reading it again too would take each of those records through the rest of the app twice."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from runtime.commands.app_topics import changelog_topics, intermediate_topics
from runtime.commands.cluster import Cluster, CommandFailed, connect
from runtime.commands.positions import Position, offsets_at, position_type
from runtime.commands.running import command_parser, run
from runtime.config import AppConfig
from runtime.kafka.topics import describe_partitions

EPILOG = """\
Every worker of the app must be stopped first: a group with active members is refused.
Intermediate topics (written by one of the app's processors, read by another) go to their end.
The local state is deleted on this machine only; delete it where other workers ran, or delete the
changelogs too (--delete-changelogs), which makes every worker rebuild its stores from nothing.

examples:
  python -m runtime reset app.yaml --dry-run
  python -m runtime reset app.yaml --to 2026-01-01T00:00:00Z
  python -m runtime reset app.yaml --delete-state --delete-changelogs     # start from scratch
"""


@dataclass(frozen=True)
class ResetPlan:
    group: str
    offsets: dict[TopicPartition, tuple[int | None, int]]  # partition -> (committed now, new)
    intermediate: set[str]  # topics the app writes itself: to their end
    missing_inputs: list[str]
    changelogs: list[str]  # to delete
    state_dir: Path | None  # to delete
    warnings: list[str]  # what the reset leaves as it is that the operator may not expect

    def describe(self, position: str) -> str:
        lines = [f"consumer group {self.group}: committed offsets to {position}"]
        width = max((len(f"{tp.topic}[{tp.partition}]") for tp in self.offsets), default=0)
        for tp, (now, new) in sorted(self.offsets.items()):
            name = f"{tp.topic}[{tp.partition}]"
            to_end = "  (intermediate: to its end)" if tp.topic in self.intermediate else ""
            lines.append(f"  {name:<{width}}  {'none' if now is None else now} -> {new}{to_end}")
        lines += [f"  {topic}: does not exist, nothing to reset" for topic in self.missing_inputs]
        lines += [f"delete changelog topic {topic}" for topic in self.changelogs]
        if self.state_dir is not None:
            lines.append(f"delete local state {self.state_dir}")
        return "\n".join(lines)


reset_point = position_type({"earliest": Position("beginning"), "latest": Position("end")}, offsets=False)


def _named(position: Position) -> str:
    if position.kind == "time":
        return datetime.fromtimestamp(position.number / 1000, UTC).isoformat()
    return "earliest" if position.kind == "beginning" else "latest"


async def active_members(admin: AIOKafkaAdminClient, group: str) -> list[str]:
    """The group's members, each as its client id and host."""
    members: list[str] = []
    for response in await admin.describe_consumer_groups([group]):
        for described in response.groups:
            members += [f"{member[1]} at {member[2].lstrip('/')}" for member in described[5]]
    return members


async def require_stopped(admin: AIOKafkaAdminClient, group: str, then: str) -> None:
    """A command that moves the group's offsets refuses while a worker runs: its next commit would undo them."""
    members = await active_members(admin, group)
    if members:
        raise CommandFailed(
            f"consumer group {group} has {len(members)} active member{'s' if len(members) > 1 else ''} "
            f"({', '.join(members)}): stop every worker of the app, then {then}"
        )


async def plan(cluster: Cluster, admin: AIOKafkaAdminClient, args: argparse.Namespace) -> ResetPlan:
    app = _app(cluster)
    inputs = sorted({topic for processor in app.processors for topic in processor.inputs})
    counts = await describe_partitions(admin, inputs)
    partitions = [TopicPartition(topic, p) for topic in inputs if topic in counts for p in range(counts[topic])]
    committed: dict[TopicPartition, Any] = await admin.list_consumer_group_offsets(app.group_id)
    intermediate = intermediate_topics(app)
    targets = await _targets(cluster, [tp for tp in partitions if tp.topic not in intermediate], args.to)
    targets |= await _targets(cluster, [tp for tp in partitions if tp.topic in intermediate], Position("end"))
    now = {tp: committed[tp].offset if tp in committed and committed[tp].offset >= 0 else None for tp in partitions}
    changelogs = sorted(changelog_topics(app)) if args.delete_changelogs else []
    state_dir = app.state_dir / app.app_id
    return ResetPlan(
        group=app.group_id,
        offsets={tp: (now[tp], targets[tp]) for tp in partitions},
        intermediate=intermediate,
        missing_inputs=[topic for topic in inputs if topic not in counts],
        changelogs=sorted((await describe_partitions(admin, changelogs)).keys()) if changelogs else [],
        state_dir=state_dir if args.delete_state and state_dir.exists() else None,
        warnings=state_warnings(app, args),
    )


def state_warnings(app: AppConfig, args: argparse.Namespace) -> list[str]:
    """A reset moves offsets only: what the stores hold stays unless both their copies are deleted, the
    local one and the changelog it is restored from."""
    if args.delete_changelogs:
        return []
    if args.delete_state:
        restored = sorted(set(changelog_topics(app).values()))
        if not restored:
            return []
        return [
            f"warning: --delete-state alone does not empty {_stores(restored)}: each is restored from its "
            "changelog at start; add --delete-changelogs to start from nothing"
        ]
    kept = sorted({store for processor in app.processors for store in processor.stores})
    if not kept or args.to.kind == "end":
        return []
    return [
        f"warning: {_stores(kept)} keep what they hold: the records processed again add to it (a total counts "
        "them twice); add --delete-state --delete-changelogs to start from nothing"
    ]


def _stores(names: list[str]) -> str:
    return f"store {names[0]}" if len(names) == 1 else f"stores {', '.join(names)}"


async def reset(cluster: Cluster, args: argparse.Namespace) -> int:
    admin = cluster.admin()
    await admin.start()
    try:
        await require_stopped(admin, _app(cluster).group_id, "reset it")
        planned = await plan(cluster, admin, args)
        print(planned.describe(_named(args.to)))
        for warning in planned.warnings:
            print(warning, file=sys.stderr)
        if args.dry_run:
            print("dry run: nothing was changed")
            return 0
        await commit_offsets(cluster, planned.group, {tp: new for tp, (_, new) in planned.offsets.items()})
        if planned.changelogs:
            await admin.delete_topics(planned.changelogs)
            await _wait_until_deleted(admin, planned.changelogs)
    finally:
        await admin.close()
    if planned.state_dir is not None:
        shutil.rmtree(planned.state_dir)
    print("done")
    return 0


async def _targets(cluster: Cluster, partitions: list[TopicPartition], to: Position) -> dict[TopicPartition, int]:
    if not partitions:
        return {}
    consumer = cluster.consumer(group_id=None)
    await consumer.start()
    try:
        return await offsets_at(consumer, partitions, to)
    finally:
        await consumer.stop()


def _app(cluster: Cluster) -> AppConfig:
    assert cluster.app is not None, "reset is given an app"
    return cluster.app


async def commit_offsets(cluster: Cluster, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Committed as a consumer outside the group's generation, which the broker takes from no one while
    the group has members: a worker started since the check makes this fail, not half-done."""
    consumer = cluster.consumer(group_id=group)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


async def _wait_until_deleted(admin: AIOKafkaAdminClient, topics: list[str]) -> None:
    for _ in range(100):
        if not await describe_partitions(admin, topics):
            return
        await asyncio.sleep(0.1)
    raise CommandFailed(f"topics {', '.join(topics)} were deleted but still show up in the cluster metadata")


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "reset",
        "Move an app's committed offsets (to its inputs' earliest or latest records, or to a "
        "time), optionally deleting its local state and its changelogs, so that it processes its inputs again.",
        EPILOG,
    )
    parser.add_argument("app", type=Path, help="the app's YAML file")
    parser.add_argument(
        "--to",
        type=reset_point,
        default=Position("beginning"),
        metavar="WHERE",
        help="earliest (default), latest, or an ISO 8601 time: the first record at or after it",
    )
    parser.add_argument("--delete-state", action="store_true", help="delete <state_dir>/<app_id> on this machine")
    parser.add_argument(
        "--delete-changelogs", action="store_true", help="delete the stores' changelog topics (created again at start)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would be done, and change nothing")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return run(args.app, lambda: asyncio.run(reset(connect(args.app), args)))
