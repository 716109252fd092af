"""Which members keep which stateful tasks' stores warm, decided by the group's leader from plain data.

As Kafka Streams does (KIP-441): a task's standbys are never on the member running it, they are spread
evenly over the members, and among members with room the one whose stores are furthest along (the
least to replay) is preferred, so that a standby stays where its store already is. Each member reports
a position per task: the sum of its stores' changelog offsets as kept in its state directory; the
furthest any member reports stands for the changelog's end.

Warm-up: when the member a task is balanced onto lags more than the acceptable recovery lag, and
another member is caught up, the task stays on a caught-up member (the one with the least lag) and the
target gets a warm-up standby, beyond the configured count; a probing rebalance later moves the task
once the warm-up has caught up. A task with no caught-up member anywhere goes to its target at once:
there is nobody to wait for.

Members that share a state directory (the processes of `--workers N` on one machine) share their stores:
a standby is never on a member whose state directory is the one the task's member runs it in.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

Task = str
"""A stateful task as the members name it, as the runtime names tasks: `processor[partition]`."""


def task_name(processor: str, partition: int) -> Task:
    return f"{processor}[{partition}]"


@dataclass(frozen=True)
class Placement:
    """Each member's tasks to run and tasks to keep warm; `warming` are the tasks left on a caught-up member
    while their balanced target warms up, which a probing rebalance looks at again."""

    active: dict[str, set[Task]]
    standbys: dict[str, set[Task]]
    warming: set[Task] = field(default_factory=set)


class Lags:
    """Records each member would replay to run each task: the furthest reported position minus its own."""

    def __init__(self, positions: Mapping[str, Mapping[Task, int]], ends: Mapping[Task, int] | None = None):
        self._positions = positions
        self._ends: dict[Task, int] = dict(ends or {})
        if ends is None:
            for reported in positions.values():
                for task, position in reported.items():
                    self._ends[task] = max(self._ends.get(task, 0), position)

    def of(self, member: str, task: Task) -> int:
        end = self._ends.get(task, 0)
        return max(0, end - self._positions.get(member, {}).get(task, 0))


def place(
    members: Sequence[str],
    positions: Mapping[str, Mapping[Task, int]],
    active: Mapping[str, Collection[Task]],
    replicas: int,
    acceptable_recovery_lag: int | None = None,
    ends: Mapping[Task, int] | None = None,
    homes: Mapping[str, str] | None = None,
) -> Placement:
    """`active` is the balanced assignment of the stateful tasks (every task on one member); with an
    `acceptable_recovery_lag`, a task whose member lags more than it may stay elsewhere while warming up.
    `homes`: each member's state directory, where members share one (by default each has its own)."""
    lags = Lags(positions, ends)
    running = {member: set(active.get(member, ())) for member in members}
    warming: dict[Task, str] = {}
    if acceptable_recovery_lag is not None:
        warming = _keep_on_caught_up(members, running, lags, acceptable_recovery_lag)
    home = {member: (homes or {}).get(member, member) for member in members}
    standbys = _spread_standbys(members, running, lags, replicas, home)
    for task, target in warming.items():
        standbys[target].add(task)
    return Placement(running, standbys, set(warming))


def _keep_on_caught_up(
    members: Sequence[str], running: dict[str, set[Task]], lags: Lags, acceptable: int
) -> dict[Task, str]:
    """Moves each task whose target lags too far onto the caught-up member with the least lag (then the
    fewest tasks); returns each task so moved with the target it warms up on."""
    warming: dict[Task, str] = {}
    for target in members:
        for task in sorted(running[target]):
            if lags.of(target, task) <= acceptable:
                continue
            caught_up = [member for member in members if member != target and lags.of(member, task) <= acceptable]
            if not caught_up:
                continue
            keeper = min(caught_up, key=lambda member: (lags.of(member, task), len(running[member]), member))
            running[target].discard(task)
            running[keeper].add(task)
            warming[task] = target
    return warming


def _spread_standbys(
    members: Sequence[str], running: Mapping[str, set[Task]], lags: Lags, replicas: int, home: Mapping[str, str]
) -> dict[str, set[Task]]:
    """`replicas` standbys of every task, none on its own member, no member above an even share while
    another with room could take it; among those with room, the least lag first, then the fewest standbys."""
    standbys: dict[str, set[Task]] = {member: set() for member in members}
    tasks = sorted(task for held in running.values() for task in held)
    owner = {task: member for member, held in running.items() for task in held}
    copies = min(replicas, len(members) - 1)
    if copies <= 0 or not tasks:
        return standbys
    share = math.ceil(len(tasks) * copies / len(members))
    for _ in range(copies):
        for task in tasks:
            homes_holding = {home[owner[task]]} | {home[m] for m in members if task in standbys[m]}
            candidates = [m for m in members if home[m] not in homes_holding]
            if not candidates:
                continue
            with_room = [m for m in candidates if len(standbys[m]) < share] or candidates
            chosen = min(with_room, key=lambda m: (lags.of(m, task), len(standbys[m]), m))
            standbys[chosen].add(task)
    return standbys
