"""The store queries' pure parts: the owners map the group's leader hands out, the committed view a read
sees, who answers a key (this worker, its owner once, or nobody: 503), and who may ask."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiokafka import TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from runtime.commands.query import main as query_command
from runtime.config import ConfigError, parse_app
from runtime.devkafka.broker import free_port
from runtime.health import FORWARDED, HealthServer, Probes, QueryEndpoint, QueryRequest, Reply
from runtime.kafka.group_assignor import GroupAssignor, Membership
from runtime.kafka.query_routing import decoded_owners
from runtime.task.task import TaskId, TaskPhase
from runtime.worker.store_queries import Session, StoreQueries
from stores.memory import MemoryBackend
from stores.partitioner import partition_for
from stores.serdes import resolve_serde
from stores.store import BufferedKeyValueStore

pytestmark = pytest.mark.anyio

HERE = "127.0.0.1:9001"


class Cluster:
    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}


def member(address: str | None) -> ConsumerProtocolMemberMetadata:
    user_data = json.dumps({"address": address}).encode() if address is not None else b""
    return ConsumerProtocolMemberMetadata(0, ["in"], user_data)


def test_the_leader_hands_every_member_the_owner_of_every_partition() -> None:
    leader = GroupAssignor(Membership("a:1"))
    assert json.loads(leader.metadata(["in"]).user_data) == {"address": "a:1", "owned": {}}
    assignments = leader.assign(Cluster(), {"m1": member("a:1"), "m2": member("b:2"), "m3": member(None)})
    assert {a.user_data for a in assignments.values()} == {assignments["m1"].user_data}, "one map for all"
    owners = decoded_owners(assignments["m2"].user_data)
    # Range over m1, m2, m3: two partitions for m1's address, one for m2's; m3 gave none, so owns none here.
    assert owners == {("in", 0): "a:1", ("in", 1): "a:1", ("in", 2): "b:2"}
    follower = GroupAssignor(Membership("b:2"))
    follower.on_assignment(assignments["m2"])
    assert follower.membership.owners == owners


def test_a_leader_without_queries_leaves_every_key_owned_by_none() -> None:
    assert decoded_owners(b"") == {}


def test_a_read_of_the_committed_view_sees_no_buffered_write() -> None:
    store = BufferedKeyValueStore(MemoryBackend(), resolve_serde("str"), resolve_serde("json"), name="counts")
    store.put("a1", 1)
    store.flush()
    store.put("a1", 2)
    store.put("a2", 5)
    assert store.get("a1") == 2, "the task reads its own writes"
    assert store.committed_get(b"a1") == 1
    assert store.committed_get(b"a2") is None
    assert store.committed_range(b"a", b"b", 10) == [("a1", 1)]
    store.flush()
    assert store.committed_range(b"a", b"b", 10) == [("a1", 2), ("a2", 5)]
    assert store.committed_range(b"a", b"b", 1) == [("a1", 2)]
    assert store.committed_range(b"a2", None, 10) == [("a2", 5)]
    assert store.committed_range(None, b"a2", 10) == [("a1", 2)]


def app(tmp_path: Path, queries: dict[str, Any] | None = None, health: dict[str, Any] | None = None) -> Any:
    return parse_app({
        "app_id": "shop",
        "topics": {"in": {"partitions": 4, "key_serde": "str"}, "prices": {"partitions": 4, "key_serde": "str",
                                                                       "cleanup_policy": "compact"}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["in"],
                        "params": {"output": "in"},
                        "stores": {"counts": {"key_serde": "str", "backend": "memory"},
                                   "recent": {"kind": "window", "retention_ms": 60_000, "backend": "memory"}},
                        "tables": {"prices": {"topic": "prices"}}}],
        "state_dir": str(tmp_path),
        "health": health or {"port": 8080},
        **({"queries": queries} if queries is not None else {}),
    })  # fmt: skip


def test_queries_need_the_health_port_and_an_address_the_others_reach(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="queries: the queries are served on the health port"):
        counting = {"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["in"]}
        parse_app({"app_id": "shop", "topics": {"in": {}}, "queries": {}, "processors": [counting]})
    with pytest.raises(ConfigError, match="give advertised_host"):
        app(tmp_path, {"host": "0.0.0.0"})
    assert app(tmp_path, {}).queries.advertised(8080) == "127.0.0.1:8080"


def partition_of(key: str) -> int:
    return partition_for(key.encode(), 4)


def running_task(
    partition: int, store: BufferedKeyValueStore, offset: int, phase: TaskPhase = TaskPhase.RUNNING
) -> Any:
    state = SimpleNamespace(stores={"counts": SimpleNamespace(store=store)},
                            committed_offsets={TopicPartition("in", partition): offset})  # fmt: skip
    return SimpleNamespace(lost=False, phase=phase, state=state)


def request(path: str, forwarded: bool = False, **query: str) -> QueryRequest:
    return QueryRequest(path, {name: [value] for name, value in query.items()}, forwarded, None)


async def ask(queries: StoreQueries, path: str, forwarded: bool = False, **query: str) -> Reply:
    return await asyncio.to_thread(queries.answer, request(path, forwarded, **query))


async def ask_range(queries: StoreQueries, fields: dict[str, str]) -> Reply:
    """`from` is no Python name: the range's fields as a dict."""
    query = {name: [value] for name, value in fields.items()}
    return await asyncio.to_thread(queries.answer, QueryRequest("/stores/counts", query, False, None))


async def test_a_key_of_this_worker_is_read_on_its_loop_with_the_offsets_of_its_last_commit(tmp_path: Path) -> None:
    store = BufferedKeyValueStore(MemoryBackend(), resolve_serde("str"), resolve_serde("msgpack"), name="counts")
    store.put("user-1", 3)
    store.flush()
    store.put("user-1", 4)  # buffered until the next commit
    p = partition_of("user-1")
    queries = StoreQueries(app(tmp_path, {}), HERE, 5.0, 10)
    tasks = {TaskId("count", p): running_task(p, store, 17)}
    queries.attach(Session(asyncio.get_running_loop(), cast(Any, tasks), {"in": 4, "prices": 4}, {}))
    queries.membership.owners = {("in", partition): HERE for partition in range(4)}

    reply = await ask(queries, "/stores/counts/user-1")
    assert reply == Reply(HTTPStatus.OK, {
        "store": "counts", "key": "user-1", "partition": p, "found": True, "value": 3,
        "offsets": [{"topic": "in", "partition": p, "offset": 17}], "worker": HERE,
    })  # fmt: skip
    elsewhere = next(key for key in (f"user-{n}" for n in range(2, 99)) if partition_of(key) != p)
    absent = await ask(queries, f"/stores/counts/{elsewhere}")
    assert absent.status == HTTPStatus.SERVICE_UNAVAILABLE, "user-2's partition has no task here"

    tasks[TaskId("count", p)] = running_task(p, store, 17, TaskPhase.RESTORING)
    restoring = await ask(queries, "/stores/counts/user-1")
    assert restoring.status == HTTPStatus.SERVICE_UNAVAILABLE and "restoring" in restoring.body["error"]


async def test_who_answers_a_key_this_worker_does_not_own(tmp_path: Path) -> None:
    queries = StoreQueries(app(tmp_path, {}), HERE, 5.0, 10)
    queries.attach(Session(asyncio.get_running_loop(), {}, {"in": 4, "prices": 4}, {}))
    p = partition_of("user-1")

    rebalancing = await ask(queries, "/stores/counts/user-1")
    assert rebalancing.status == HTTPStatus.SERVICE_UNAVAILABLE and "rebalancing" in rebalancing.body["error"]
    queries.membership.owners = {}
    assert (await ask(queries, "/stores/counts/user-1")).status == HTTPStatus.SERVICE_UNAVAILABLE

    with OwnerServer() as (owner, asked):
        queries.membership.owners = {("in", p): owner}
        routed = await ask(queries, "/stores/counts/user-1")
        assert routed == Reply(HTTPStatus.OK, {"worker": owner})
        assert asked == [("/stores/counts/user-1", HERE)], "asked once, saying it asks on another's behalf"
        refused = await ask(queries, "/stores/counts/user-1", forwarded=True)
        assert refused.status == HTTPStatus.SERVICE_UNAVAILABLE, "asked on a key's behalf, it never asks a third"
        assert len(asked) == 1
    gone = await ask(queries, "/stores/counts/user-1")
    assert gone.status == HTTPStatus.SERVICE_UNAVAILABLE and "did not answer" in gone.body["error"]


async def test_what_cannot_be_asked_is_told(tmp_path: Path) -> None:
    queries = StoreQueries(app(tmp_path, {}), HERE, 5.0, 10)
    assert (await ask(queries, "/stores/counts/k")).status == HTTPStatus.SERVICE_UNAVAILABLE, "not processing yet"
    queries.attach(Session(asyncio.get_running_loop(), {}, {"in": 4, "prices": 4}, {}))
    assert (await ask(queries, "/stores/nothing/k")).status == HTTPStatus.NOT_FOUND
    window = await ask(queries, "/stores/recent/k")
    assert window.status == HTTPStatus.BAD_REQUEST and "window" in window.body["error"]
    assert (await ask(queries, "/stores/counts")).status == HTTPStatus.NOT_FOUND
    bad = await ask(queries, "/stores/counts", prefix="a", partitions="x")
    assert bad.status == HTTPStatus.BAD_REQUEST


class OwnerServer:
    """Another worker: answers every query with its own address, and notes who asked what."""

    def __enter__(self) -> tuple[str, list[tuple[str, str | None]]]:
        asked: list[tuple[str, str | None]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked.append((self.path, self.headers.get(FORWARDED)))
                data = json.dumps({"worker": address}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return address, asked

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Echo:
    def answer(self, request: QueryRequest) -> Reply:
        if request.query:
            return Reply(HTTPStatus.OK, {"path": request.path, "query": request.query})
        return Reply(HTTPStatus.OK, {"path": request.path, "forwarded": request.forwarded})


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    try:
        url = f"http://127.0.0.1:{port}{path}"
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_health_server_serves_queries_to_who_may_ask() -> None:
    port = free_port()
    server = HealthServer(Probes(30.0, list), "127.0.0.1", port, QueryEndpoint(Echo(), "127.0.0.1", "s3cret"))
    server.start()
    try:
        assert get(port, "/stores/counts/k")[0] == 401
        assert get(port, "/stores/counts/k", {"Authorization": "Bearer wrong"})[0] == 401
        assert get(port, "/stores/counts/k", {"Authorization": "Bearer s3cret", FORWARDED: "x:1"}) == (
            200, {"path": "/stores/counts/k", "forwarded": True})  # fmt: skip
        assert get(port, "/stores/counts?prefix=", {"Authorization": "Bearer s3cret"}) == (
            200, {"path": "/stores/counts", "query": {"prefix": [""]}})  # fmt: skip
        assert get(port, "/live") == (200, {"live": True}), "the probes need no token"
    finally:
        server.stop()
    port = free_port()
    elsewhere = HealthServer(Probes(30.0, list), "127.0.0.1", port, QueryEndpoint(Echo(), "127.0.0.2", None))
    elsewhere.start()
    try:
        assert get(port, "/stores/counts/k")[0] == 403, "asked on an address the queries are not served on"
    finally:
        elsewhere.stop()


def test_the_query_command_prints_the_answer_or_says_why_there_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    yaml = tmp_path / "app.yaml"
    yaml.write_text(json.dumps({
        "app_id": "shop", "topics": {"in": {"key_serde": "str"}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["in"],
                        "stores": {"counts": {"key_serde": "str"}}}],
        "health": {"port": 8080}, "queries": {"token": "s3cret"},
    }))  # fmt: skip
    with OwnerServer() as (owner, asked):
        assert query_command([str(yaml), "counts", "user 1", "--url", f"http://{owner}"]) == 0
        assert json.loads(capsys.readouterr().out) == {"worker": owner}
        assert query_command([str(yaml), "counts", "--prefix", "user", "--url", f"http://{owner}"]) == 0
        assert query_command([str(yaml), "counts", "--from", "a b", "--url", f"http://{owner}"]) == 0
        assert [path for path, _ in asked] == [
            "/stores/counts/user%201", "/stores/counts?prefix=user", "/stores/counts?from=a+b",
        ]  # fmt: skip
    with pytest.raises(SystemExit):
        query_command([str(yaml), "counts", "--prefix", "user", "--to", "v"])
    port = free_port()
    server = HealthServer(Probes(30.0, list), "127.0.0.1", port, QueryEndpoint(Rebalancing(), "127.0.0.1", "s3cret"))
    server.start()
    try:
        assert query_command([str(yaml), "counts", "k", "--url", f"http://127.0.0.1:{port}"]) == 1
        assert "rebalancing" in capsys.readouterr().err, "the token from the YAML was sent, and the reason told"
    finally:
        server.stop()


class Rebalancing:
    def answer(self, request: QueryRequest) -> Reply:
        return Reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "the group is rebalancing"})


async def test_a_prefix_or_a_range_is_read_from_every_partition_each_with_its_offsets(tmp_path: Path) -> None:
    stores = {
        p: BufferedKeyValueStore(MemoryBackend(), resolve_serde("str"), resolve_serde("msgpack")) for p in range(4)
    }
    for n in range(12):
        stores[partition_of(f"user-{n}")].put(f"user-{n}", n)
    stores[0].put("other", 0)
    for store in stores.values():
        store.flush()
    queries = StoreQueries(app(tmp_path, {}), HERE, 5.0, 10)
    tasks = {TaskId("count", p): running_task(p, stores[p], 100 + p) for p in range(4)}
    queries.attach(Session(asyncio.get_running_loop(), cast(Any, tasks), {"in": 4, "prices": 4}, {}))
    queries.membership.owners = {("in", p): HERE for p in range(4)}

    reply = await ask(queries, "/stores/counts", prefix="user-")
    assert reply.status == HTTPStatus.OK
    assert reply.body["truncated"] is True, "12 keys match, 10 are returned"
    assert len(reply.body["items"]) == 10
    assert all(item["key"] == f"user-{item['value']}" for item in reply.body["items"])
    assert all(item["partition"] == partition_of(item["key"]) for item in reply.body["items"])
    assert [(p["partition"], p["offsets"][0]["offset"]) for p in reply.body["partitions"]] == [
        (p, 100 + p) for p in range(4)
    ]
    between = await ask_range(queries, {"from": "user-10", "to": "user-2"})
    assert between.status == HTTPStatus.OK and between.body["from"] == "user-10" and not between.body["truncated"]
    assert sorted(item["key"] for item in between.body["items"]) == ["user-10", "user-11"], "from <= key < to"
    above = await ask_range(queries, {"from": "user-8"})
    assert sorted(item["key"] for item in above.body["items"]) == ["user-8", "user-9"], "no `to`: open above"
    below = await ask(queries, "/stores/counts", to="other~")
    assert [item["key"] for item in below.body["items"]] == ["other"], "no `from`: open below"
    both = await ask(queries, "/stores/counts", prefix="user-", to="user-5")
    assert both.status == HTTPStatus.BAD_REQUEST, "a prefix or a range, not both"

    queries.membership.owners = {("in", p): HERE for p in range(3)}
    missing = await ask(queries, "/stores/counts", prefix="user-")
    assert missing.status == HTTPStatus.SERVICE_UNAVAILABLE, "a partition owned by nobody: no partial answer"


def test_queries_are_answered_where_the_health_server_listens(tmp_path: Path) -> None:
    config = app(tmp_path, {"host": "10.0.0.7"})
    assert config.queries.advertised(8081) == "10.0.0.7:8081"
    with pytest.raises(ConfigError, match=r"queries\.host: '127\.0\.0\.1' is not where the health server listens"):
        app(tmp_path, {}, {"host": "10.0.0.7"})
