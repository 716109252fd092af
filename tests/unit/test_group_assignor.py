"""The group's assignors: sticky, balanced, co-partitioned, never two owners at once, with the owners map the
store queries route by; and what a cooperative rebalance's assignment revokes, keeps and adds."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.protocol.group import JoinGroupRequest

from runtime.config import ConfigError, Rebalance, parse_app
from runtime.kafka.aiokafka_internals import RebalanceSteps, assign_keeping
from runtime.kafka.cooperative_coordinator import handover
from runtime.kafka.group_assignor import (
    COOPERATIVE_STICKY,
    RANGE,
    CooperativeStickyAssignor,
    GroupAssignor,
    Membership,
    assignors,
    member_report,
)
from runtime.kafka.query_routing import decoded_owners

pytestmark = pytest.mark.anyio

TOPICS = ("orders", "payments")  # co-partitioned: partition N of both meet on one worker


class Cluster:
    def __init__(self, partitions: int):
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.partitions))


def joined(owned: Iterable[int] = (), address: str | None = None) -> ConsumerProtocolMemberMetadata:
    """A member's metadata as a worker running the tasks of partitions `owned` sends it."""
    membership = Membership(address, frozenset(TopicPartition(t, p) for t in TOPICS for p in owned))
    return GroupAssignor(membership).metadata(TOPICS)


def units(assignments: Mapping[str, ConsumerProtocolMemberAssignment]) -> dict[str, set[int]]:
    """Each member's partition numbers, checked to be whole: partition N of every topic, or of none."""
    found: dict[str, set[int]] = {}
    for member, assignment in assignments.items():
        by_topic = {topic: set(partitions) for topic, partitions in assignment.assignment}
        numbers = set().union(*by_topic.values()) if by_topic else set()
        assert all(by_topic.get(topic, set()) == numbers for topic in TOPICS), f"{member} got a split unit"
        found[member] = numbers
    return found


def rebalance(
    members: Mapping[str, Iterable[int]], partitions: int = 6
) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """One round, and the next after every member revoked what it lost: (first round, settled)."""
    assignor = CooperativeStickyAssignor(Membership())
    first = units(assignor.assign(Cluster(partitions), {m: joined(owned) for m, owned in members.items()}))
    kept = {member: set(members[member]) & first[member] for member in members}
    second = units(assignor.assign(Cluster(partitions), {m: joined(owned) for m, owned in kept.items()}))
    return first, second


def test_a_new_member_takes_nothing_another_still_runs_until_the_second_round() -> None:
    first, settled = rebalance({"a": range(6), "b": ()})
    assert first == {"a": {0, 1, 2}, "b": set()}, "a keeps its share; what it gives up goes to no one yet"
    assert settled == {"a": {0, 1, 2}, "b": {3, 4, 5}}


def test_scaling_out_moves_only_the_new_members_share() -> None:
    first, settled = rebalance({"a": {0, 1, 2}, "b": {3, 4, 5}, "c": ()})
    assert settled["a"] | settled["b"] | settled["c"] == set(range(6))
    assert [len(settled[m]) for m in "abc"] == [2, 2, 2]
    assert settled["a"] <= {0, 1, 2} and settled["b"] <= {3, 4, 5}, "a and b keep what they did not give up"
    assert first["a"] == settled["a"] and first["b"] == settled["b"]


def test_a_member_leaving_hands_its_partitions_out_at_once() -> None:
    first, _ = rebalance({"a": {0, 1}, "b": {2, 3}})  # c, which ran 4 and 5, left
    assert first == {"a": {0, 1, 4}, "b": {2, 3, 5}}


def test_no_partition_has_two_owners_and_every_member_gets_its_share() -> None:
    owned = {"a": {0, 1, 2, 3, 4}, "b": {5, 6}, "c": set(), "d": {7}}
    first, settled = rebalance(owned, partitions=9)
    for round_ in (first, settled):
        for member, numbers in round_.items():
            others = set().union(*(owned[m] & round_[m] for m in owned if m != member))
            assert not numbers & others, f"{member} was handed what another still runs"
    assert sorted(len(numbers) for numbers in settled.values()) == [2, 2, 2, 3]
    assert set().union(*settled.values()) == set(range(9))


def test_a_unit_two_members_claim_goes_to_neither_until_both_gave_it_up() -> None:
    first, settled = rebalance({"a": {0, 1}, "b": {1}})
    assert 1 not in first["a"] | first["b"]
    assert 1 in settled["a"] | settled["b"], "then to one of them"


def test_range_keeps_partition_n_of_every_input_together_and_waits_for_a_revoke() -> None:
    assigned = units(GroupAssignor(Membership()).assign(Cluster(4), {"m1": joined(), "m2": joined({2, 3, 0})}))
    # Range gives m1 partitions 0 and 1; m2 still runs 0, so m1 gets it once m2 revoked it.
    assert assigned == {"m1": {1}, "m2": {2, 3}}


def test_every_member_learns_the_owner_of_every_partition() -> None:
    assignor = CooperativeStickyAssignor(Membership("a:1"))
    members = {"m1": joined({0, 1}, "a:1"), "m2": joined({2}, "b:2"), "m3": joined({3})}
    assignments = assignor.assign(Cluster(4), members)
    assert len({a.user_data for a in assignments.values()}) == 1, "one map for all"
    owners = decoded_owners(assignments["m1"].user_data)
    assert {tp: owner for tp, owner in owners.items() if tp[0] == "orders"} == {
        ("orders", 0): "a:1",
        ("orders", 1): "a:1",
        ("orders", 2): "b:2",
    }, "m3 gave no address: the keys it runs are owned by none"
    follower = CooperativeStickyAssignor(Membership("b:2"))
    follower.on_assignment(assignments["m2"])
    assert follower.membership.owners == owners


def test_a_member_tells_what_it_runs_and_where_it_answers() -> None:
    report = member_report(joined({1}, "a:1"))
    assert report.address == "a:1"
    assert report.owned == {TopicPartition("orders", 1), TopicPartition("payments", 1)}
    plain = member_report(ConsumerProtocolMemberMetadata(0, ["orders"], b""))  # a plain range assignor's
    assert (plain.address, plain.owned) == (None, frozenset())
    old = member_report(ConsumerProtocolMemberMetadata(0, ["orders"], json.dumps({"address": "c:3"}).encode()))
    assert (old.address, old.owned) == ("c:3", frozenset())


def test_a_worker_offers_cooperative_first_and_range_beside_it_unless_eager() -> None:
    assert [a.name for a in assignors(Membership(), cooperative=True)] == [COOPERATIVE_STICKY, RANGE]
    assert [a.name for a in assignors(Membership(), cooperative=False)] == [RANGE]


def tps(*numbers: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition("orders", n) for n in numbers)


def test_a_cooperative_assignment_revokes_only_what_it_took_away_and_starts_only_what_it_added() -> None:
    change = handover(unrevoked=tps(0, 1, 2), owned=tps(0, 1, 2), assigned=tps(0, 1))
    assert (change.revoked, change.kept, change.added, change.rejoin) == (tps(2), tps(0, 1), tps(), True)
    change = handover(unrevoked=tps(0, 1), owned=tps(0, 1), assigned=tps(0, 1, 3))
    assert (change.revoked, change.kept, change.added, change.rejoin) == (tps(), tps(0, 1), tps(3), False)


def test_after_an_eager_join_everything_assigned_starts_and_nothing_is_revoked_again() -> None:
    change = handover(unrevoked=tps(), owned=tps(), assigned=tps(0, 1))
    assert (change.revoked, change.kept, change.added, change.rejoin) == (tps(), tps(), tps(0, 1), False)


def test_a_partition_whose_task_was_taken_over_starts_again_when_assigned_again() -> None:
    # Partition 1's task was dropped (its commit refused): not reported as owned, it starts anew if assigned.
    change = handover(unrevoked=tps(0, 1), owned=tps(0), assigned=tps(0, 1))
    assert (change.revoked, change.kept, change.added, change.rejoin) == (tps(), tps(0), tps(1), False)
    change = handover(unrevoked=tps(0, 1), owned=tps(0), assigned=tps(0))
    assert (change.revoked, change.rejoin) == (tps(1), False), "given back, and no one waited for it"


def test_a_task_taken_over_during_the_join_starts_again_though_its_partitions_were_reported_owned() -> None:
    # Partition 1's task was dropped after the member told the leader it ran it: assigned to it again, it is
    # not kept (nothing would run it, and no rebalance would come to start it), it starts anew.
    change = handover(unrevoked=tps(0, 1), owned=tps(0, 1), assigned=tps(0, 1), running=tps(0))
    assert (change.revoked, change.kept, change.added, change.rejoin) == (tps(), tps(0), tps(1), False)


async def test_a_kept_partition_keeps_its_fetch_position_and_pause_across_the_new_assignment() -> None:
    """aiokafka's new assignment starts every partition over from its committed offset; a kept one does not."""
    state = SubscriptionState()
    state.subscribe({"orders"})
    state.assign_from_subscribed(set(tps(0, 1, 2)))
    for partition in (0, 1, 2):
        state.seek(TopicPartition("orders", partition), 40 + partition)
    state.pause(TopicPartition("orders", 0))
    coordinator = SimpleNamespace(_subscription=state)  # what assign_keeping reads of a coordinator
    after = assign_keeping(coordinator, tps(0, 1, 3), kept=tps(0, 1))
    assert after is state.subscription.assignment and after.tps == tps(0, 1, 3)
    kept = [after.state_value(TopicPartition("orders", p)) for p in (0, 1)]
    assert [s.position for s in kept] == [40, 41], "kept: no record fetched again, none skipped"
    assert [s.paused for s in kept] == [True, False], "a paused partition stays paused, as its holds say"
    assert not after.state_value(TopicPartition("orders", 3)).has_valid_position, "added: from its commit"
    assert after.state_value(TopicPartition("orders", 2)) is None


async def test_a_join_is_sent_once_with_every_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka 0.14 sends a JoinGroup after adding each assignor's protocol; the leader's second would start
    another rebalance. The first goes with both, the next of the same join is answered with its response."""
    sent: list[list[str]] = []

    async def send(coordinator: object, request: JoinGroupRequest) -> object:
        sent.append([name for name, _ in request._group_protocols])
        return SimpleNamespace(error_code=0)

    monkeypatch.setattr(GroupCoordinator, "_send_req", send)
    coordinator = object.__new__(RebalanceSteps)  # only what a join reads of it
    coordinator._subscription = SimpleNamespace(subscription=SimpleNamespace(topics=frozenset({"orders"})))
    coordinator._assignors = assignors(Membership(), cooperative=True)
    protocols: list[tuple[str, bytes]] = []
    responses = []
    for assignor in coordinator._assignors:  # as aiokafka's perform_group_join loops
        protocols.append((assignor.name, assignor.metadata(["orders"]).encode()))
        request = JoinGroupRequest("group", 10_000, 30_000, "", None, "consumer", protocols)
        responses.append(await coordinator._send_req(request))
    assert sent == [[COOPERATIVE_STICKY, RANGE]]
    assert responses[0] is responses[1]


def test_rebalance_is_cooperative_unless_the_yaml_says_eager_and_nothing_else() -> None:
    app = {
        "app_id": "counts",
        "topics": {"in": {"partitions": 2}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["in"]}],
    }
    assert parse_app(app).rebalance is Rebalance.COOPERATIVE
    assert parse_app({**app, "rebalance": "eager"}).rebalance is Rebalance.EAGER
    with pytest.raises(ConfigError, match="rebalance"):
        parse_app({**app, "rebalance": "incremental"})
