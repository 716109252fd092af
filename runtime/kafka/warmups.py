"""Warm-up placement (KIP-441) in the cooperative assignor's units: partition N of every input goes to one
member, so the stateful tasks of partition N (`processor[N]` for each stateful processor) move together,
and a member is caught up on unit N when replaying all their stores' lag there costs at most the
acceptable recovery lag.

A unit whose balanced target is not caught up stays on (or goes to) a caught-up member, and the target
keeps its stores warm meanwhile, as a standby; the group's leader rebalances again after the probing
interval, and a target caught up by then takes its unit. A unit nobody is caught up on goes to its target
at once: there is nobody to wait for. The choice of the caught-up member and the warm-up itself are
runtime/kafka/standby_placement.py's, given units for tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.kafka.standby_placement import Lags, Task, place, task_name


@dataclass(frozen=True)
class Units:
    """The stateful tasks of each partition number, and each member's reported positions of them."""

    tasks: Mapping[int, frozenset[Task]]
    positions: Mapping[str, Mapping[Task, int]]

    def ends(self) -> dict[Task, int]:
        """Per unit, named as a task: the furthest position any member reported of each of its tasks, summed."""
        return {
            str(unit): sum(max((held.get(task, 0) for held in self.positions.values()), default=0) for task in tasks)
            for unit, tasks in self.tasks.items()
        }

    def unit_positions(self) -> dict[str, dict[Task, int]]:
        """Per member and unit, its positions of the unit's tasks summed: the unit's lag is theirs summed."""
        return {
            member: {str(unit): sum(held.get(task, 0) for task in tasks) for unit, tasks in self.tasks.items()}
            for member, held in self.positions.items()
        }

    def lags(self) -> Lags:
        return Lags(self.unit_positions(), self.ends())

    def caught_up(self, acceptable: int) -> dict[int, frozenset[str]]:
        """The members caught up on each stateful unit."""
        lags = self.lags()
        return {
            unit: frozenset(member for member in self.positions if lags.of(member, str(unit)) <= acceptable)
            for unit in self.tasks
        }


def stateful_units(first_inputs: Mapping[str, str], counts: Mapping[str, int]) -> dict[int, frozenset[Task]]:
    """`first_inputs`: each stateful processor's first input, whose partition N its task N reads."""
    tasks: dict[int, set[Task]] = {}
    for processor, topic in first_inputs.items():
        for unit in range(counts.get(topic, 0)):
            tasks.setdefault(unit, set()).add(task_name(processor, unit))
    return {unit: frozenset(held) for unit, held in tasks.items()}


@dataclass(frozen=True)
class WarmUps:
    """The units each member runs once units not caught up on their target were kept back, and the tasks
    each such target warms up."""

    units: dict[str, set[int]]
    warming: dict[str, set[Task]]

    @property
    def needs_probing(self) -> bool:
        return any(self.warming.values())


def kept_on_caught_up(
    target: Mapping[str, set[int]], units: Units, acceptable: int, homes: Mapping[str, str] | None = None
) -> WarmUps:
    """`target`: each member's balanced units."""
    members = sorted(target)
    placed = place(
        members,
        units.unit_positions(),
        {member: {str(unit) for unit in held if unit in units.tasks} for member, held in target.items()},
        0,
        acceptable,
        ends=units.ends(),
        homes=homes,
    )
    kept = {member: {unit for unit in held if unit not in units.tasks} for member, held in target.items()}
    for member, names in placed.active.items():
        kept[member] |= {int(name) for name in names}
    kept_back = {int(name) for name in placed.warming}
    warming = {
        member: {task for unit in held & kept_back for task in units.tasks[unit]} for member, held in target.items()
    }
    return WarmUps(kept, warming)
