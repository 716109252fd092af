"""How the app's group divides its input partitions: one design, offered under two protocol names.

Every member joins with user data that says what it owns and where its store queries are answered
(`{"address": ..., "owned": {topic: [partitions]}}`); the leader hands every member the owners map, from
query address to partitions, in the assignment's user data (`{"owners": ...}`,
runtime/kafka/query_routing.py).

With standby replicas, each member also tells its state directory (`home`) and the positions of the
stores it holds there (`positions`, per task), and the leader tells each member the tasks it keeps warm
(`standbys`), placed by runtime/kafka/standby_placement.py around the tasks' balanced owners.

Partition N of every input goes to one worker (co-partitioned inputs meet there, docs/design.md's walk of
a record), so both assignors deal in partition numbers, "units", not in topic partitions:

- `cooperative-sticky` (KIP-429): each member keeps what it owns up to its balanced share; the rest goes
  to those below theirs. A partition that moves is not handed to its new owner while its old owner still
  reports it: the old owner only loses it, revokes it and rejoins, and the second round hands it over.
- `range`: what the runtime always used, and what a worker that knows no other offers: a group of old
  and new workers agrees on it, and uses `cooperative-sticky` once every member offers it.

Under either, a partition another member still reports owning is handed to no one: the round after its
owner revoked it hands it over.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor

from runtime.kafka.aiokafka_internals import (
    ClusterMetadata,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from runtime.kafka.query_routing import Owners, decoded_owners, json_object, owners_by_address
from runtime.kafka.standby_placement import Task, place, task_name
from runtime.kafka.warmups import Units, WarmUps, kept_on_caught_up, stateful_units

COOPERATIVE_STICKY = "cooperative-sticky"
RANGE = "range"
VERSION = 0


class StandbyHost(Protocol):
    """What keeps this member's standbys: the positions of the stores its state directory holds, and the
    tasks the leader asks it to keep warm."""

    def positions(self) -> Mapping[Task, int]: ...

    def follow(self, tasks: set[Task]) -> None: ...


@dataclass(frozen=True)
class StandbyGroup:
    """`first_inputs`: each stateful processor's first input, whose partition N its task N reads; `home`: this
    member's state directory (host and path), which the members that share it share their stores in."""

    replicas: int
    first_inputs: Mapping[str, str]
    home: str
    host: StandbyHost
    acceptable_recovery_lag: int | None = None
    """A task goes to a member this many records behind at most, while another one is caught up (warm-ups)."""
    probing_interval_s: float = 600.0
    """How soon after a rebalance that left warm-ups the leader rebalances again to move their tasks."""


@dataclass
class Membership:
    """What this worker tells the group at each join, and what the group told it back."""

    address: str | None = None
    """Where this worker answers store queries; None without queries."""
    owned: frozenset[TopicPartition] = frozenset()
    """The partitions it still runs tasks of as it joins (the group coordinator sets them before each join)."""
    owners: Owners | None = field(default=None)
    """The owners map of the last assignment; None while a rebalance took this worker's partitions away."""
    standbys: StandbyGroup | None = None
    """Set when the app keeps standby replicas."""
    probe_in_s: float | None = None
    """Set by the leader's assignment when it left warm-ups: the delay of the probing rebalance."""

    def user_data(self) -> bytes:
        owned: dict[str, list[int]] = defaultdict(list)
        for tp in sorted(self.owned):
            owned[tp.topic].append(tp.partition)
        joined: dict[str, Any] = {"address": self.address, "owned": owned}
        if self.standbys is not None:
            joined |= {"home": self.standbys.home, "positions": dict(self.standbys.host.positions())}
        return json.dumps(joined).encode()


@dataclass(frozen=True)
class MemberReport:
    """What a member joined with, as the leader reads it."""

    topics: frozenset[str]
    address: str | None
    owned: frozenset[TopicPartition]
    home: str | None = None
    """Its state directory; None from a member without standbys."""
    positions: Mapping[Task, int] = field(default_factory=dict)
    """Its stores' positions per task."""


def member_report(metadata: ConsumerProtocolMemberMetadata) -> MemberReport:
    """A member's subscription and user data; a member that sent none, or none this runtime reads (a plain
    range assignor's), has no address and owns nothing."""
    data = json_object(metadata.user_data)
    address = data.get("address")
    home = data.get("home")
    owned = data.get("owned")
    tps = (
        frozenset(TopicPartition(topic, int(p)) for topic, partitions in owned.items() for p in partitions)
        if isinstance(owned, dict)
        else frozenset()
    )
    return MemberReport(
        frozenset(metadata.subscription),
        address if isinstance(address, str) else None,
        tps,
        home if isinstance(home, str) else None,
        positions_of(data),
    )


def positions_of(fields: Mapping[str, Any]) -> dict[Task, int]:
    """The store positions a member reported, what is not a task's whole number left out."""
    reported = fields.get("positions")
    if not isinstance(reported, dict):
        return {}
    return {task: offset for task, offset in reported.items() if isinstance(offset, int) and offset >= 0}


class GroupAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Both protocols' common part: the user data each member joins with, and the owners map handed back."""

    name = RANGE
    version = VERSION

    def __init__(self, membership: Membership):
        self.membership = membership

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), self.membership.user_data())

    def assign(
        self, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        reports = {member: member_report(metadata) for member, metadata in members.items()}
        counts = {
            topic: len(cluster.partitions_for_topic(topic) or ())
            for report in reports.values()
            for topic in report.topics
        }
        warm_ups = self.warm_ups(self.divide(counts, reports), counts, reports)
        target = {member: unit_partitions(warm_ups.units[member], reports[member].topics, counts) for member in reports}
        group = self.membership.standbys
        self.membership.probe_in_s = group.probing_interval_s if group and warm_ups.needs_probing else None
        assigned = {
            member: tps - others_own(reports, member)  # what another member still runs waits for its revoke
            for member, tps in target.items()
        }
        owners = owners_by_address({reports[member].address: by_topic(tps).items() for member, tps in assigned.items()})
        standbys = self.placed_standbys(reports, target)
        for member, tasks in warm_ups.warming.items():
            standbys.setdefault(member, set()).update(tasks)
        return {
            member: ConsumerProtocolMemberAssignment(
                self.version,
                sorted(by_topic(tps).items()),
                json.dumps({"owners": owners} | assigned_standbys(standbys.get(member))).encode(),
            )
            for member, tps in assigned.items()
        }

    def placed_standbys(
        self, reports: Mapping[str, MemberReport], target: Mapping[str, set[TopicPartition]]
    ) -> dict[str, set[Task]]:
        """Placed around the balanced owners, not the ones a revoke still holds back: a task moving this
        round has its standbys where it is going."""
        group = self.membership.standbys
        if group is None or group.replicas == 0:
            return {}
        active = {
            member: {
                task_name(processor, tp.partition)
                for tp in tps
                for processor, first in group.first_inputs.items()
                if first == tp.topic
            }
            for member, tps in target.items()
        }
        positions = {member: report.positions for member, report in reports.items()}
        homes = {member: report.home or member for member, report in reports.items()}
        return place(sorted(reports), positions, active, group.replicas, homes=homes).standbys

    def divide(self, counts: Mapping[str, int], reports: Mapping[str, MemberReport]) -> dict[str, set[int]]:
        """Range: the members in order of their id, each a run of partition numbers, the first ones one more."""
        members = sorted(reports)
        units = sorted(range(max(counts.values(), default=0)))
        share, extra = divmod(len(units), len(members))
        assigned: dict[str, set[int]] = {}
        start = 0
        for index, member in enumerate(members):
            length = share + (1 if index < extra else 0)
            assigned[member] = set(units[start : start + length])
            start += length
        return assigned

    def warm_ups(
        self, target: dict[str, set[int]], counts: Mapping[str, int], reports: Mapping[str, MemberReport]
    ) -> WarmUps:
        """None under range: its assignment follows the members' ids alone."""
        return WarmUps(target, {})

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.membership.owners = decoded_owners(assignment.user_data)
        if self.membership.standbys is not None:
            told = json_object(assignment.user_data).get("standbys")
            self.membership.standbys.host.follow(
                {task for task in told if isinstance(task, str)} if isinstance(told, list) else set()
            )


class CooperativeStickyAssignor(GroupAssignor):
    """Sticky and balanced: a member keeps what it owns, so a rebalance moves only what balance needs."""

    name = COOPERATIVE_STICKY

    def divide(self, counts: Mapping[str, int], reports: Mapping[str, MemberReport]) -> dict[str, set[int]]:
        units = list(range(max(counts.values(), default=0)))
        owner_of: dict[int, str] = {}
        for member in sorted(reports, key=lambda m: (-len(reports[m].owned), m)):  # a unit claimed twice: the
            for tp in sorted(reports[member].owned):  # member that owns more keeps it
                if tp.partition < len(units):
                    owner_of.setdefault(tp.partition, member)
        units_of = self.units(counts, reports)
        group = self.membership.standbys
        caught_up = (
            units_of.caught_up(group.acceptable_recovery_lag)
            if units_of is not None and group is not None and group.acceptable_recovery_lag is not None
            else {}
        )
        kept = sticky_shares(units, sorted(reports), owner_of, caught_up)
        return {member: set(kept[member]) for member in reports}

    def warm_ups(
        self, target: dict[str, set[int]], counts: Mapping[str, int], reports: Mapping[str, MemberReport]
    ) -> WarmUps:
        """A stateful unit whose target lags more than the acceptable recovery lag, while another member is
        caught up, stays there and warms up on its target (runtime/kafka/warmups.py)."""
        group = self.membership.standbys
        units = self.units(counts, reports)
        if units is None or group is None or group.acceptable_recovery_lag is None:
            return WarmUps(target, {})
        homes = {member: report.home or member for member, report in reports.items()}
        return kept_on_caught_up(target, units, group.acceptable_recovery_lag, homes)

    def units(self, counts: Mapping[str, int], reports: Mapping[str, MemberReport]) -> Units | None:
        """The stateful units and the members' positions of their tasks; None without standbys."""
        group = self.membership.standbys
        if group is None:
            return None
        return Units(
            stateful_units(group.first_inputs, counts), {member: report.positions for member, report in reports.items()}
        )


def assigned_standbys(tasks: set[Task] | None) -> dict[str, list[Task]]:
    """The field only for a member with standbys: a worker of a version before them reads every field as an
    address, and fails on a list."""
    return {"standbys": sorted(tasks)} if tasks else {}


def others_own(reports: Mapping[str, MemberReport], member: str) -> set[TopicPartition]:
    return set().union(*(report.owned for other, report in reports.items() if other != member))


def sticky_shares(
    units: list[int],
    members: list[str],
    owner_of: Mapping[int, str],
    caught_up: Mapping[int, frozenset[str]] | None = None,
) -> dict[str, list[int]]:
    """Each member's balanced share of the units: what it owned first, up to its share; the members that own
    most take the shares one larger; the units left go, in order, to the members below their share.

    `caught_up`: the members whose stores are caught up on each stateful unit. A member above its share
    gives up first the units a member below its share is caught up on, and a member below its share takes
    first a unit it is caught up on: a warm-up that caught up is where its unit goes."""
    share, extra = divmod(len(units), len(members))
    owned: dict[str, list[int]] = {member: [] for member in members}
    for unit in units:
        if owner_of.get(unit) in owned:
            owned[owner_of[unit]].append(unit)
    by_claim = sorted(members, key=lambda m: (-len(owned[m]), m))
    quota = {member: share + (1 if index < extra else 0) for index, member in enumerate(by_claim)}
    warm = caught_up or {}
    below = frozenset(member for member in members if len(owned[member]) < quota[member])

    def wanted_below(unit: int) -> bool:
        return bool(warm.get(unit, frozenset()) & below)

    kept = {member: sorted(sorted(owned[member], key=wanted_below)[: quota[member]]) for member in members}
    taken = {unit for units_kept in kept.values() for unit in units_kept}
    free = [unit for unit in units if unit not in taken]
    order = sorted(members, key=lambda m: (len(kept[m]), m))
    for member in order:
        for unit in [unit for unit in free if member in warm.get(unit, frozenset())]:
            if len(kept[member]) < quota[member]:
                free.remove(unit)
                kept[member].append(unit)
    for member in order:
        while len(kept[member]) < quota[member]:
            kept[member].append(free.pop(0))
    return kept


def unit_partitions(units: Iterable[int], topics: Iterable[str], counts: Mapping[str, int]) -> set[TopicPartition]:
    """Partition N of every topic the member subscribes to that has one."""
    return {TopicPartition(topic, unit) for unit in units for topic in topics if unit < counts.get(topic, 0)}


def by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    partitions: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(tps):
        partitions[tp.topic].append(tp.partition)
    return dict(partitions)


def assignors(membership: Membership, cooperative: bool) -> tuple[GroupAssignor, ...]:
    """The protocols this worker offers, preferred first: both, or `range` alone (`rebalance: eager`)."""
    plain = GroupAssignor(membership)
    return (CooperativeStickyAssignor(membership), plain) if cooperative else (plain,)
