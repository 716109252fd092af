"""`describe --standbys`: which member of the app's group keeps which task's stores warm, and how far behind.

What the group's leader told each member (its standbys) and what each told at its last join (its state
directory and its stores' positions) are read from the group; a standby whose state directory is on this
machine is read there, as it stands now. One elsewhere is told as it was at its member's last join: it has
followed its changelog since, so its lag is at most that (the live figure is the metric
kafka_actor.standby.lag).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from runtime.commands.cluster import Cluster
from runtime.config import AppConfig
from runtime.kafka.aiokafka_internals import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from runtime.kafka.group_assignor import positions_of
from runtime.kafka.query_routing import json_object
from runtime.kafka.standby_placement import Task
from runtime.kafka.topics import describe_partitions
from runtime.state.standbys import StandbyStore, state_home, stateful_tasks
from stores.rocksdb import stored_offset


@dataclass(frozen=True)
class StandbyLag:
    task: str
    member: str  # its client id and host
    home: str  # the state directory it keeps the standby in
    changelog_end: int  # of the task's stores' changelogs together
    lag: int  # records behind
    live: bool  # read in the state directory now, else as the member last joined (at most this far behind)


@dataclass(frozen=True)
class Member:
    name: str
    joined: dict[str, Any]  # the named fields of its subscription
    standbys: list[Task]  # what the leader told it


async def standby_lags(cluster: Cluster, app: AppConfig) -> list[StandbyLag]:
    admin = cluster.admin()
    await admin.start()
    try:
        members = await group_members(admin, app.group_id)
        counts = await describe_partitions(admin, app.input_topics())
    finally:
        await admin.close()
    tasks = stateful_tasks(app, counts)
    ends = await changelog_ends(cluster, [store.changelog for stores in tasks.values() for store in stores])
    here = state_home(app)
    return [
        lag_of(member, task, tasks[task], ends, here) for member in members for task in member.standbys if task in tasks
    ]


async def group_members(admin: Any, group: str) -> list[Member]:
    members = []
    for response in await admin.describe_consumer_groups([group]):
        for described in response.to_object()["groups"]:
            for member in described["members"]:
                joined = json_object(ConsumerProtocolMemberMetadata.decode(member["member_metadata"]).user_data)
                told = json_object(ConsumerProtocolMemberAssignment.decode(member["member_assignment"]).user_data)
                standbys = told.get("standbys")
                members.append(
                    Member(
                        f"{member['client_id']} at {member['client_host'].lstrip('/')}",
                        joined,
                        [task for task in standbys if isinstance(task, str)] if isinstance(standbys, list) else [],
                    )
                )
    return members


async def changelog_ends(cluster: Cluster, changelogs: list[TopicPartition]) -> dict[TopicPartition, int]:
    if not changelogs:
        return {}
    consumer = cluster.consumer(group_id=None)
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(changelogs))
    finally:
        await consumer.stop()


def lag_of(
    member: Member, task: Task, stores: list[StandbyStore], ends: Mapping[TopicPartition, int], here: str
) -> StandbyLag:
    end = sum(ends.get(store.changelog, 0) for store in stores)
    home = str(member.joined.get("home", ""))
    live = home == here
    if live:
        position = sum(stored_offset(store.path) or 0 for store in stores)
    else:
        position = positions_of(member.joined).get(task, 0)
    return StandbyLag(task, member.name, home, end, max(0, end - position), live)


def render_lags(lags: list[StandbyLag]) -> str:
    if not lags:
        return "standbys: none (standby_replicas is 0, or no worker of the app runs)"
    lines = ["standbys:"]
    for lag in lags:
        behind = f"{lag.lag} records behind" if lag.live else f"at most {lag.lag} records behind (at its last join)"
        lines.append(f"  {lag.task} on {lag.member} in {lag.home}: {behind}, changelog end {lag.changelog_end}")
    return "\n".join(lines)
