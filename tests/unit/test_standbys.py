"""Standby stores without a broker: which tasks have them, the positions a member reports from its state
directory, a standby given up the moment its task lands on the worker, and the assignor's user data."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from runtime.commands.describe import render, topology
from runtime.commands.standby_lags import StandbyLag, render_lags
from runtime.config import AppConfig, parse_app
from runtime.kafka.group_assignor import GroupAssignor, Membership, StandbyGroup
from runtime.kafka.query_routing import decoded_owners
from runtime.state.standbys import StandbyStores, first_inputs, stateful_tasks
from runtime.state.task_state import store_path
from stores import open_backend
from stores.rocksdb import RocksDBBackend, held_offset, stored_offset, wipe


def app(tmp_path: Path) -> AppConfig:
    return parse_app(
        {
            "app_id": "shop",
            "state_dir": str(tmp_path),
            "standby_replicas": 1,
            "topics": {"orders": {"partitions": 2}, "clicks": {"partitions": 3}},
            "processors": [
                {
                    "name": "count",
                    "class": "tests.support.apps:CountPerKey",
                    "inputs": ["orders"],
                    "params": {"output": "orders"},
                    "stores": {"counts": {}, "scratch": {"backend": "memory"}, "unlogged": {"changelog": False}},
                },
                {
                    "name": "pass",
                    "class": "tests.support.apps:CountPerKey",
                    "inputs": ["clicks"],
                    "params": {"output": "clicks"},
                    "stores": {"clicks_seen": {"backend": "memory"}},
                },
            ],
        }
    )


def test_only_rocksdb_stores_with_a_changelog_have_standbys(tmp_path: Path) -> None:
    config = app(tmp_path)
    tasks = stateful_tasks(config, {"orders": 2, "clicks": 3})
    assert sorted(tasks) == ["count[0]", "count[1]"], "a memory store would start empty in its task anyway"
    (store,) = tasks["count[1]"]
    assert (store.name, store.changelog) == ("counts", TopicPartition("shop-counts-changelog", 1))
    assert store.path == store_path(config, "counts", 1), "where the task's own store lives"
    assert first_inputs(config) == {"count": "orders"}


def test_a_member_reports_the_offsets_its_state_directory_holds(tmp_path: Path) -> None:
    config = app(tmp_path)
    kept = RocksDBBackend(store_path(config, "counts", 1))
    kept.write([(b"k", b"v")], 42)
    stores = StandbyStores(stateful_tasks(config, {"orders": 2}))
    assert stores.positions() == {"count[1]": 42}, "read while the store is open elsewhere"
    kept.write([], 50)
    kept.close()
    assert held_offset(store_path(config, "counts", 1)) == 50, "as it closed, without opening it again"
    wipe(store_path(config, "counts", 1))
    assert held_offset(store_path(config, "counts", 1)) is None
    assert stored_offset(tmp_path / "nothing") is None


def test_a_standby_follows_from_its_offset_and_lets_go_when_its_task_lands_here(tmp_path: Path) -> None:
    config = app(tmp_path)
    path = store_path(config, "counts", 0)
    earlier = RocksDBBackend(path)
    earlier.write([(b"k", b"v")], 7)
    earlier.close()
    stores = StandbyStores(stateful_tasks(config, {"orders": 2}))
    stores.follow({"count[0]", "count[1]", "other[5]"})
    assert stores.following == {"count[0]", "count[1]"}
    stores.open_wanted()
    changelog = TopicPartition("shop-counts-changelog", 0)
    assert stores.open == {changelog: 7, TopicPartition("shop-counts-changelog", 1): None}
    record = SimpleNamespace(key=b"k", value=None)
    stores.apply(changelog, [record], 9, end=12)
    assert stores.lags() == {("shop-counts-changelog", 0): 3}
    stores.follow({"count[1]"})  # count[0] is this worker's task now: its store must open at once
    task_store = open_backend("rocksdb", path)
    assert task_store.changelog_offset() == 9 and task_store.get(b"k") is None, "the standby's write, tombstone too"
    task_store.close()
    stores.apply(changelog, [record], 10, end=12)  # a read that ended after the task took it: nothing written
    assert stored_offset(path) == 9
    assert stores.changed.is_set()
    stores.close()


def test_a_store_held_by_a_leaving_task_is_missing_until_it_opens(tmp_path: Path) -> None:
    config = app(tmp_path)
    held = RocksDBBackend(store_path(config, "counts", 0))
    stores = StandbyStores(stateful_tasks(config, {"orders": 2}))
    stores.follow({"count[0]"})
    stores.open_wanted()
    assert stores.missing and not stores.open
    held.close()
    stores.open_wanted()
    assert not stores.missing and set(stores.open) == {TopicPartition("shop-counts-changelog", 0)}
    stores.close()


class Host:
    def __init__(self, positions: dict[str, int]) -> None:
        self._positions = positions
        self.followed: set[str] | None = None

    def positions(self) -> dict[str, int]:
        return self._positions

    def follow(self, tasks: set[str]) -> None:
        self.followed = tasks


class Cluster:
    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}


def assignor(address: str | None, standbys: StandbyGroup | None = None) -> GroupAssignor:
    return GroupAssignor(Membership(address, standbys=standbys))


def joined(assignor: GroupAssignor) -> ConsumerProtocolMemberMetadata:
    return assignor.metadata(["in"])


def test_the_leader_places_standbys_from_what_members_tell_in_named_fields() -> None:
    hosts = {"m1": Host({"p[2]": 90}), "m2": Host({}), "m3": Host({"p[0]": 50})}
    assignors = {
        member: assignor(
            f"{member}:1" if member != "m3" else None, StandbyGroup(1, {"p": "in"}, f"host-{member}", host)
        )
        for member, host in hosts.items()
    }
    fields: dict[str, Any] = json.loads(joined(assignors["m1"]).user_data)
    assert fields == {"address": "m1:1", "owned": {}, "home": "host-m1", "positions": {"p[2]": 90}}
    assignments = assignors["m1"].assign(Cluster(), {m: joined(a) for m, a in assignors.items()})
    for member, assignment in assignments.items():
        assignors[member].on_assignment(assignment)
    # Range: m1 runs p[0] and p[1], m2 p[2], m3 p[3]. m3 has p[0] warm, m1 p[2]; the rest by balance.
    assert {member: host.followed for member, host in hosts.items()} == {
        "m1": {"p[2]", "p[3]"},
        "m2": {"p[1]"},
        "m3": {"p[0]"},
    }
    assert decoded_owners(assignments["m2"].user_data) == {
        ("in", 0): "m1:1",
        ("in", 1): "m1:1",
        ("in", 2): "m2:1",
    }, "m3 answers no queries"


def test_a_member_that_tells_nothing_readable_gets_standbys_by_balance_alone() -> None:
    host = Host({})
    leader = assignor(None, StandbyGroup(1, {"p": "in"}, "home", host))
    members = {"m1": joined(leader), "m2": ConsumerProtocolMemberMetadata(0, ["in"], b"\xff not json")}
    assignments = leader.assign(Cluster(), members)
    told = {member: json.loads(assignment.user_data).get("standbys") for member, assignment in assignments.items()}
    assert told == {"m1": ["p[2]", "p[3]"], "m2": ["p[0]", "p[1]"]}
    leader.on_assignment(ConsumerProtocolMemberAssignment(0, [], b"{}"))
    assert host.followed == set(), "a leader without standbys asks for none"


def test_describe_tells_the_replicas_and_each_standbys_lag_live_here_or_as_it_joined(tmp_path: Path) -> None:
    assert render(topology(app(tmp_path))).startswith("app shop: consumer group shop, at_least_once, 1 standby replica")
    lags = [
        StandbyLag("count[0]", "shop-consumer at 10.0.0.8", "b:/state/shop", 305, 0, live=True),
        StandbyLag("count[1]", "shop-consumer at 10.0.0.7", "a:/state/shop", 152, 40, live=False),
    ]
    assert render_lags(lags).splitlines() == [
        "standbys:",
        "  count[0] on shop-consumer at 10.0.0.8 in b:/state/shop: 0 records behind, changelog end 305",
        "  count[1] on shop-consumer at 10.0.0.7 in a:/state/shop: at most 40 records behind (at its last join), "
        "changelog end 152",
    ]
    assert render_lags([]).startswith("standbys: none")


def test_a_leader_of_the_version_before_named_fields_is_still_understood() -> None:
    legacy = json.dumps({"a:1": {"in": [0, 1]}}).encode()
    assert decoded_owners(legacy) == {("in", 0): "a:1", ("in", 1): "a:1"}
    plain = assignor("a:1").assign(Cluster(), {"m1": joined(assignor("a:1"))})
    assert json.loads(plain["m1"].user_data) == {"owners": {"a:1": {"in": [0, 1, 2, 3]}}}, "no standbys, no field"
