"""Cooperative rebalancing (KIP-429) on the classic group protocol: a rebalance stops only what moves.

aiokafka rebalances eagerly: before joining, a member revokes every partition, and after the join it is
assigned its whole new set, so every task stops for every change of the group's members. Once the group
chose `cooperative-sticky` (runtime/kafka/group_assignor.py), this coordinator instead:

- before the join revokes nothing: the tasks go on processing and committing what they hold, and the
  member tells the leader what it still runs (`Membership.owned`);
- after the join revokes only what the assignment took away, assigns only what it added, and keeps the
  fetch position of everything else (runtime/kafka/aiokafka_internals.py's `assign_keeping`);
- when it revoked anything, rejoins at once: the leader handed those partitions to no one, and the second
  round hands them to their new owner;
- when it led a round that left warm-ups (runtime/kafka/warmups.py), rejoins after the probing interval:
  a probing rebalance, which moves the tasks whose warm-up caught up and stops nothing else.

A member dropped from the group (its generation reset) may have lost what it held to another: it revokes
everything before joining again, as does a member of a group that chose `range` (a group with a worker
that offers nothing else), and the first join of all.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from runtime.kafka.aiokafka_internals import (
    NO_GENERATION,
    RebalanceSteps,
    assign_keeping,
    assigned_partitions,
    assignor_named,
    assignors,
    build_group_coordinators_as,
    forget_group_subscription,
    group_coordinator,
    rebalance_listener,
    refresh_committed_for,
    revoke_all_before_join,
)
from runtime.kafka.group_assignor import COOPERATIVE_STICKY, GroupAssignor, Membership

log = logging.getLogger(__name__)


class HoldingListener(ConsumerRebalanceListener, abc.ABC):  # type: ignore[misc]
    """A rebalance listener that knows which partitions it still runs tasks of: a task dropped since the
    last rebalance (its commit was refused) holds nothing, and its partitions are not reported as owned."""

    @abc.abstractmethod
    def held(self) -> set[TopicPartition]: ...


@dataclass(frozen=True)
class Handover:
    """What a cooperative rebalance's assignment changes for one member."""

    revoked: frozenset[TopicPartition]
    """Assigned before and not now: given back (none of them is anyone else's yet)."""
    kept: frozenset[TopicPartition]
    """Still running, and assigned again: their tasks and fetch positions stay."""
    added: frozenset[TopicPartition]
    """Assigned now and not running here: their tasks start."""
    rejoin: bool
    """It gave back what it had reported owning: the leader withheld those from their new owner until then."""


def handover(
    unrevoked: frozenset[TopicPartition],
    owned: frozenset[TopicPartition],
    assigned: frozenset[TopicPartition],
    running: frozenset[TopicPartition] | None = None,
) -> Handover:
    """`unrevoked`: the partitions assigned and not revoked before the join (none after an eager one);
    `owned`: those the member reported running as it joined; `running`: those it still runs as the join ends,
    when it knows (a task taken over meanwhile runs no more, and its partitions, assigned again, start anew)."""
    kept = owned & assigned if running is None else owned & running & assigned
    return Handover(unrevoked - assigned, kept, assigned - kept, bool(owned - assigned))


class CooperativeCoordinator(RebalanceSteps):
    """aiokafka's group coordinator, cooperative while the group's protocol is `cooperative-sticky`.

    Offsets committed through it (at-least-once's) wait while the member joins: sent with the generation
    it joins from, one that reaches the coordinator after the group moved to the next is refused, and
    aiokafka then drops the member's id and rejoins, which starts another rebalance, in which the next
    commit can be refused again. Kept tasks go on processing meanwhile; their offsets go once it joined.
    A transaction's offsets do not come here (runtime/guarantees/worker_transaction.py)."""

    protocol: str | None = None
    """The protocol of the group's generation this member is in; None before its first join."""
    unrevoked: frozenset[TopicPartition] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.settled = asyncio.Event()
        self.settled.set()
        self._probe: asyncio.TimerHandle | None = None

    async def commit_offsets(self, assignment: Any, offsets: Any) -> None:
        await self.settled.wait()
        await super().commit_offsets(assignment, offsets)

    async def close(self) -> None:
        self.settled.set()  # a commit waiting for a join that will not come is refused as it goes
        self._schedule_probe(None)
        await super().close()

    async def prepare_join(self, previous_assignment: Any) -> None:
        membership = self.membership()
        if membership is not None:
            membership.probe_in_s = None  # set again by this round's assignment if this member leads it
        if membership is None or not self.cooperative_now() or previous_assignment is None:
            self.settled.set()  # the revoke's final commit goes in this generation
            await revoke_all_before_join(self, previous_assignment)
            self.unrevoked = frozenset()
            if membership is not None:
                membership.owned, membership.owners = frozenset(), None
            return
        forget_group_subscription(self)
        self.settled.clear()
        self.unrevoked = assigned_partitions(self)
        listener = rebalance_listener(self)
        held = listener.held() if isinstance(listener, HoldingListener) else self.unrevoked
        membership.owned = frozenset(held) & self.unrevoked
        log.info("rejoining group %s: its %d partitions keep running", self.group_id, len(membership.owned))

    async def complete_join(self, protocol: str, assignment: Any) -> None:
        self.settled.set()  # joined: the revokes' final commits, and the kept tasks' waiting ones, go now
        membership = self.membership()
        if membership is None:
            await super().complete_join(protocol, assignment)
            return
        assigned = frozenset(assignment.partitions())
        listener = rebalance_listener(self)
        running = frozenset(listener.held()) if isinstance(listener, HoldingListener) else None
        change = handover(self.unrevoked, membership.owned, assigned, running)
        log.info(
            "joined group %s (generation %s, %s): %d partitions kept, %d given up (%s), %d new (%s)",
            self.group_id,
            self.generation,
            protocol,
            len(change.kept),
            len(change.revoked),
            named(change.revoked),
            len(change.added),
            named(change.added),
        )
        if listener is not None and change.revoked:  # first: their final commit needs them still assigned
            await self._tell(listener.on_partitions_revoked(set(change.revoked)), "on_partitions_revoked")
        new_assignment = assign_keeping(self, assigned, change.kept)
        assignor_named(self, protocol).on_assignment(assignment)
        self._schedule_probe(membership.probe_in_s)
        await refresh_committed_for(self, new_assignment)
        self.protocol, self.unrevoked, membership.owned = protocol, frozenset(), assigned
        if listener is not None:
            await self._tell(listener.on_partitions_assigned(set(change.added)), "on_partitions_assigned")
        if change.rejoin:
            self.request_rejoin()

    def _schedule_probe(self, delay_s: float | None) -> None:
        """The probing rebalance this member's last round asked for, and none other."""
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None
        if delay_s is not None:
            log.info(
                "warm-ups under way: group %s rebalances again in %.0fs to move what caught up", self.group_id, delay_s
            )
            self._probe = asyncio.get_running_loop().call_later(delay_s, self.request_rejoin)

    def cooperative_now(self) -> bool:
        """The group's generation is cooperative and this member is still in it."""
        return self.protocol == COOPERATIVE_STICKY and self.generation != NO_GENERATION

    def membership(self) -> Membership | None:
        """The runtime's membership, shared by the assignors it offers; None in a consumer it did not build."""
        return next((a.membership for a in assignors(self) if isinstance(a, GroupAssignor)), None)

    async def _tell(self, call: Any, what: str) -> None:
        """As aiokafka does: a listener's failure is logged, and the rebalance goes on."""
        try:
            if inspect.isawaitable(call):
                await call
        except Exception:
            log.exception("the rebalance listener of group %s failed in %s", self.group_id, what)


async def join_ended(consumer: AIOKafkaConsumer, timeout_s: float) -> None:
    """Returns once the consumer's cooperative join under way (if any) ended, or after `timeout_s`. Offsets sent
    in a transaction while the member joins are refused by the generation it joins from; once it joined, the
    same offsets go with the new one, as the member still owns the partitions (none moves before its owner
    revoked it)."""
    coordinator = group_coordinator(consumer)
    if isinstance(coordinator, CooperativeCoordinator) and not coordinator.settled.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(coordinator.settled.wait(), timeout_s)


def named(tps: frozenset[TopicPartition]) -> str:
    """`topic[0,2]`, one per topic: short enough for a line per rebalance."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{topic}[{','.join(map(str, partitions))}]" for topic, partitions in by_topic.items())


def use_cooperative_coordinators() -> None:
    """Every consumer with a group builds a `CooperativeCoordinator`: aiokafka's own unless it offers
    `cooperative-sticky` and its group chose it."""
    build_group_coordinators_as(CooperativeCoordinator)
