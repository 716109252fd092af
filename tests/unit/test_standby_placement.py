"""Where the group's leader puts each stateful task's standbys and warm-ups, from the members' store positions."""

from __future__ import annotations

from collections import Counter

import pytest

from runtime.kafka.standby_placement import Lags, place, task_name

MEMBERS = ["a", "b", "c"]
TASKS = [task_name("count", partition) for partition in range(6)]


def balanced(members: list[str], tasks: list[str]) -> dict[str, set[str]]:
    return {member: set(tasks[i :: len(members)]) for i, member in enumerate(members)}


def test_a_standby_is_never_on_the_member_running_its_task() -> None:
    active = balanced(MEMBERS, TASKS)
    placement = place(MEMBERS, {}, active, replicas=2)
    for member in MEMBERS:
        assert not placement.standbys[member] & placement.active[member]
    assert Counter(task for held in placement.standbys.values() for task in held) == {task: 2 for task in TASKS}


@pytest.mark.parametrize("replicas", [1, 2])
def test_standbys_are_spread_evenly(replicas: int) -> None:
    placement = place(MEMBERS, {}, balanced(MEMBERS, TASKS), replicas=replicas)
    counts = [len(held) for held in placement.standbys.values()]
    assert counts == [2 * replicas] * 3


def test_a_member_with_the_store_warm_keeps_its_standby() -> None:
    positions = {"a": {TASKS[1]: 1000}, "b": {TASKS[1]: 990}, "c": {TASKS[1]: 10}}
    active = {"a": {TASKS[1]}, "b": set(), "c": set()}
    assert place(MEMBERS, positions, active, replicas=1).standbys == {"a": set(), "b": {TASKS[1]}, "c": set()}
    positions = {"a": {TASKS[1]: 1000}, "b": {TASKS[1]: 10}, "c": {TASKS[1]: 990}}
    assert place(MEMBERS, positions, active, replicas=1).standbys == {"a": set(), "b": set(), "c": {TASKS[1]}}


def test_warmth_gives_way_to_an_even_spread() -> None:
    """c has every store warm, but takes no more than its share: the others get the rest."""
    positions = {"c": {task: 100 for task in TASKS}}
    placement = place(MEMBERS, positions, balanced(["a", "b"], TASKS) | {"c": set()}, replicas=1)
    assert len(placement.standbys["c"]) == 2
    assert sum(len(held) for held in placement.standbys.values()) == 6


def test_more_replicas_than_other_members_are_capped() -> None:
    placement = place(["a", "b"], {}, {"a": {TASKS[0]}, "b": set()}, replicas=3)
    assert placement.standbys == {"a": set(), "b": {TASKS[0]}}


def test_one_member_or_no_replicas_keeps_no_standby() -> None:
    assert place(["a"], {}, {"a": set(TASKS)}, replicas=1).standbys == {"a": set()}
    assert place(MEMBERS, {}, balanced(MEMBERS, TASKS), replicas=0).standbys == {m: set() for m in MEMBERS}


def test_lag_is_the_furthest_position_reported_minus_a_members_own() -> None:
    lags = Lags({"a": {"t[0]": 500}, "b": {"t[0]": 200}})
    assert (lags.of("a", "t[0]"), lags.of("b", "t[0]"), lags.of("c", "t[0]")) == (0, 300, 500)
    assert Lags({"a": {"t[0]": 500}}, ends={"t[0]": 800}).of("a", "t[0]") == 300


def test_a_target_far_behind_warms_up_while_a_caught_up_member_keeps_the_task() -> None:
    """b is balanced onto count[0] but has nothing of it; a has it all: a keeps it, b gets a warm-up
    standby, and a probing rebalance is asked for."""
    positions = {"a": {TASKS[0]: 10_000}, "b": {}}
    placement = place(["a", "b"], positions, {"a": set(), "b": {TASKS[0]}}, replicas=0, acceptable_recovery_lag=100)
    assert placement.active == {"a": {TASKS[0]}, "b": set()}
    assert placement.standbys == {"a": set(), "b": {TASKS[0]}}
    assert placement.warming == {TASKS[0]}


def test_a_target_within_the_acceptable_lag_takes_its_task_at_once() -> None:
    positions = {"a": {TASKS[0]: 10_000}, "b": {TASKS[0]: 9_950}}
    placement = place(["a", "b"], positions, {"a": set(), "b": {TASKS[0]}}, replicas=1, acceptable_recovery_lag=100)
    assert placement.active == {"a": set(), "b": {TASKS[0]}}
    assert placement.standbys == {"a": {TASKS[0]}, "b": set()}
    assert not placement.warming


def test_with_nobody_caught_up_the_task_goes_to_its_target() -> None:
    """A restore has to happen somewhere: waiting for a warm-up would only delay it."""
    positions = {"a": {TASKS[0]: 0}, "b": {TASKS[0]: 10}, "c": {TASKS[0]: 20}}
    active = {"a": {TASKS[0]}, "b": set(), "c": set()}
    placement = place(MEMBERS, positions, active, replicas=0, acceptable_recovery_lag=5, ends={TASKS[0]: 100})
    assert placement.active == active and not placement.warming


def test_the_caught_up_member_with_the_least_lag_keeps_the_task() -> None:
    positions = {"b": {TASKS[0]: 96}, "c": {TASKS[0]: 99}}
    active = {"a": {TASKS[0]}, "b": set(), "c": set()}
    placement = place(MEMBERS, positions, active, replicas=0, acceptable_recovery_lag=5, ends={TASKS[0]: 100})
    assert placement.active == {"a": set(), "b": set(), "c": {TASKS[0]}}
    assert placement.standbys["a"] == {TASKS[0]}


def test_a_warm_up_is_beside_the_configured_standbys_and_not_on_the_keeper() -> None:
    positions = {"a": {TASKS[0]: 10_000}, "b": {}, "c": {TASKS[0]: 10_000}}
    active = {"a": set(), "b": {TASKS[0]}, "c": set()}
    placement = place(MEMBERS, positions, active, replicas=1, acceptable_recovery_lag=100)
    keeper = next(member for member, held in placement.active.items() if held)
    assert keeper in ("a", "c") and keeper != "b"
    assert TASKS[0] in placement.standbys["b"], "the warm-up"
    others = [m for m in ("a", "c") if m != keeper]
    assert placement.standbys[others[0]] == {TASKS[0]}, "the configured standby, on the other caught-up member"
    assert not placement.standbys[keeper]


def test_no_standby_shares_a_state_directory_with_its_task_or_another_standby() -> None:
    """a1 and a2 are two processes on one machine: a standby there would be the running task's own store."""
    homes = {"a1": "host-a", "a2": "host-a", "b": "host-b", "c": "host-c"}
    members = ["a1", "a2", "b", "c"]
    active = {"a1": {TASKS[0]}, "a2": set(), "b": set(), "c": set()}
    placement = place(members, {}, active, replicas=2, homes=homes)
    assert placement.standbys == {"a1": set(), "a2": set(), "b": {TASKS[0]}, "c": {TASKS[0]}}
    placement = place(members, {}, active, replicas=3, homes=homes)
    assert sum(len(held) for held in placement.standbys.values()) == 2, "two other directories: two standbys"
