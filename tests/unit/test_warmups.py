"""Warm-up placement in the cooperative assignor (KIP-441): a task goes to a member caught up on its stores,
its balanced target warms up meanwhile, and the probing rebalance moves it once the warm-up caught up."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from aiokafka import TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from runtime.config import ConfigError, parse_app
from runtime.kafka.group_assignor import CooperativeStickyAssignor, GroupAssignor, Membership, StandbyGroup

ACCEPTABLE = 100
PROBING_S = 0.5
FULL = 1000  # every task's changelog end in these tests


class Host:
    def __init__(self, positions: Mapping[str, int]) -> None:
        self._positions = dict(positions)

    def positions(self) -> dict[str, int]:
        return self._positions

    def follow(self, tasks: set[str]) -> None:
        pass


class Cluster:
    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}


def membership(owned: set[int], positions: Mapping[str, int], replicas: int = 0) -> Membership:
    group = StandbyGroup(replicas, {"p": "in"}, "", Host(positions), ACCEPTABLE, PROBING_S)
    return Membership(None, frozenset(TopicPartition("in", p) for p in owned), standbys=group)


def warm(units: set[int], lag: int = 0) -> dict[str, int]:
    return {f"p[{unit}]": FULL - lag for unit in units}


def assign(
    leader: GroupAssignor, members: Mapping[str, Membership]
) -> tuple[dict[str, set[int]], dict[str, list[str]]]:
    metadata = {
        member: ConsumerProtocolMemberMetadata(0, ["in"], joined.user_data()) for member, joined in members.items()
    }
    assignments: dict[str, ConsumerProtocolMemberAssignment] = leader.assign(Cluster(), metadata)
    active = {member: {p for _, ps in a.assignment for p in ps} for member, a in assignments.items()}
    standbys = {member: json.loads(a.user_data).get("standbys", []) for member, a in assignments.items()}
    return active, standbys


def test_a_task_stays_on_the_caught_up_member_while_its_balanced_target_warms_up() -> None:
    members = {"m1": membership({0, 1, 2, 3}, warm({0, 1, 2, 3})), "m2": membership(set(), {})}
    leader = CooperativeStickyAssignor(members["m1"])
    active, standbys = assign(leader, members)
    assert active == {"m1": {0, 1, 2, 3}, "m2": set()}, "m2 has nothing warm: m1 keeps running all four"
    assert standbys == {"m1": [], "m2": ["p[2]", "p[3]"]}, "m2 warms up its balanced share"
    assert leader.membership.probe_in_s == PROBING_S


def test_the_probing_rebalance_moves_the_tasks_whose_warm_up_caught_up_and_only_those() -> None:
    members = {"m1": membership({0, 1, 2, 3}, warm({0, 1, 2, 3})), "m2": membership(set(), warm({3}, lag=ACCEPTABLE))}
    leader = CooperativeStickyAssignor(members["m1"])
    active, standbys = assign(leader, members)
    # m1 gives up 3, the one m2 is caught up on, not the 2 the balance would take first; 3 waits for its revoke.
    assert active == {"m1": {0, 1, 2}, "m2": set()}
    assert standbys["m2"] == ["p[2]"], "the other half of m2's share still warms up"
    assert leader.membership.probe_in_s == PROBING_S
    members["m1"].owned = frozenset(TopicPartition("in", p) for p in (0, 1, 2))
    active, standbys = assign(leader, members)
    assert active == {"m1": {0, 1, 2}, "m2": {3}}, "the round after the revoke hands 3 over"


def test_with_every_warm_up_caught_up_the_group_is_balanced_and_probes_no_more() -> None:
    members = {"m1": membership({0, 1}, warm({0, 1, 2, 3})), "m2": membership({2, 3}, warm({2, 3}, lag=ACCEPTABLE))}
    leader = CooperativeStickyAssignor(members["m1"])
    active, _ = assign(leader, members)
    assert active == {"m1": {0, 1}, "m2": {2, 3}}, "within the acceptable lag counts as caught up"
    assert leader.membership.probe_in_s is None


def test_tasks_no_member_holds_go_where_balance_says_at_once() -> None:
    members = {"m1": membership(set(), {}), "m2": membership(set(), {})}
    leader = CooperativeStickyAssignor(members["m1"])
    active, standbys = assign(leader, members)
    assert active == {"m1": {0, 1}, "m2": {2, 3}}
    assert standbys == {"m1": [], "m2": []} and leader.membership.probe_in_s is None


def test_a_dead_members_task_goes_to_the_standby_that_is_caught_up_not_to_its_balanced_target() -> None:
    members = {
        "m1": membership({0}, warm({0, 2})),  # m1 keeps the standby of 2
        "m2": membership({1}, warm({1})),
        "m3": membership(set(), {}),  # a new worker, nothing warm
    }
    leader = CooperativeStickyAssignor(members["m1"])
    active, standbys = assign(leader, members)
    assert active == {"m1": {0, 2}, "m2": {1}, "m3": {3}}, "the standby's member takes 2 over, the new one 3"
    assert standbys["m3"] == [] and leader.membership.probe_in_s is None


def test_range_places_no_warm_ups() -> None:
    members = {"m1": membership(set(), warm({0, 1, 2, 3})), "m2": membership(set(), {})}
    leader = GroupAssignor(members["m1"])
    active, standbys = assign(leader, members)
    assert active == {"m1": {0, 1}, "m2": {2, 3}} and standbys == {"m1": [], "m2": []}
    assert leader.membership.probe_in_s is None


def test_the_warm_up_settings_default_as_kafka_streams_and_refuse_what_cannot_be() -> None:
    processor = {"name": "p", "class": "tests.support.apps:CountPerKey", "inputs": ["in"], "params": {"output": "in"}}
    app = {"app_id": "a", "topics": {"in": {"partitions": 1}}, "processors": [processor]}
    config = parse_app(app)
    assert (config.acceptable_recovery_lag, config.probing_rebalance_interval_ms) == (10_000, 600_000)
    for field, value in (("acceptable_recovery_lag", -1), ("probing_rebalance_interval_ms", 0)):
        with pytest.raises(ConfigError, match=field):
            parse_app(app | {field: value})
