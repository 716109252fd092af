"""Reads of a worker's stores from outside its processors, answered on the health port.

A key is read where its partition's task runs: here, read on the event loop between two of its steps,
so that what is read and the offsets told with it belong to one commit; elsewhere, asked of the worker
that owns the partition (`runtime/kafka/query_routing.py`), which answers itself and never passes the
question on. A read sees the stores' committed contents only, never the writes buffered until the next
commit: under exactly-once, what a restart would find, and what the offsets told say it reflects.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiokafka import TopicPartition

from processors.serdes import Serde
from runtime.config import AppConfig
from runtime.health import FORWARDED, QueryRequest, Reply
from runtime.kafka.group_assignor import Membership
from runtime.state.task_state import TaskState
from runtime.task.task import Task, TaskId, TaskPhase
from stores.partitioner import partition_for
from stores.ranges import prefix_end
from stores.serdes import BytesSerde, resolve_serde
from stores.text_keys import KeyNotEncodable, encoded_key

PATH_PREFIX = "/stores/"
RANGE_FIELDS = ("prefix", "from", "to")


class Unanswered(Exception):
    """A query this worker cannot answer now, and the reply that says why."""

    def __init__(self, reply: Reply):
        super().__init__(reply.body.get("error"))
        self.reply = reply


@dataclass(frozen=True)
class QueriedStore:
    """A store a query may read: a key-value store, or a table without history."""

    name: str
    processor: str
    topic: str  # the processor's first input: its partition of a key is the task's
    key_serde: Serde

    def key_bytes(self, text: str) -> bytes:
        return encoded_key(self.key_serde, isinstance(self.key_serde, BytesSerde), text)


@dataclass(frozen=True)
class KeyRange:
    """The keys a range read asks for, by encoded key bytes: those under a prefix, or from one key up to
    (not including) another, either side left open when not given."""

    lower: bytes | None
    upper: bytes | None
    fields: dict[str, str]  # as asked: told in the answer, and passed on to the owners of other partitions

    @classmethod
    def asked(cls, store: QueriedStore, query: Mapping[str, list[str]]) -> KeyRange:
        fields = {name: query[name][0] for name in RANGE_FIELDS if name in query}
        if "prefix" in fields:
            if len(fields) > 1:
                raise not_queryable("ask for keys under a prefix, or from one key to another, not both")
            lower = fields["prefix"].encode()
            return cls(lower, prefix_end(lower), fields)
        try:
            bounds = {name: store.key_bytes(text) for name, text in fields.items()}
        except KeyNotEncodable as error:
            raise not_queryable(str(error)) from None
        return cls(bounds.get("from"), bounds.get("to"), fields)


@dataclass(frozen=True)
class Session:
    """What the worker's session has built, for the queries to find the tasks and their partitions by."""

    loop: asyncio.AbstractEventLoop
    tasks: Mapping[TaskId, Task]
    partition_counts: Mapping[str, int]
    topic_serdes: Mapping[str, tuple[Serde, Serde]]


class StoreQueries:
    """The answers to `/stores/NAME/KEY`, `/stores/NAME?prefix=P` and `/stores/NAME?from=A&to=B`, given from the
    health server's threads."""

    def __init__(self, config: AppConfig, address: str, timeout_s: float, max_items: int):
        self.membership = Membership(address)
        self._address = address
        self._config = config
        self._timeout_s = timeout_s
        self._max_items = max_items
        self._session: Session | None = None

    @property
    def address(self) -> str:
        return self._address

    def attach(self, session: Session) -> None:
        self._session = session

    def detach(self) -> None:
        self._session = None

    def answer(self, request: QueryRequest) -> Reply:
        try:
            return self._answer(request)
        except Unanswered as unanswered:
            return unanswered.reply

    def _answer(self, request: QueryRequest) -> Reply:
        name, _, key = request.path[len(PATH_PREFIX) :].partition("/")
        session = self._session
        if session is None:
            raise unavailable("the worker is not processing yet (or any more): it owns no partition")
        store = self._store(urllib.parse.unquote(name), session)
        if key:
            return self._key(store, urllib.parse.unquote(key), request, session)
        if any(name in request.query for name in RANGE_FIELDS):
            return self._range(store, request, session)
        raise Unanswered(
            Reply(HTTPStatus.NOT_FOUND, {"error": "ask /stores/NAME/KEY, /stores/NAME?prefix=P or ?from=A&to=B"})
        )

    def _store(self, name: str, session: Session) -> QueriedStore:
        for spec in self._config.processors:
            topic = spec.inputs[0] if spec.inputs else None
            if name in spec.stores and topic is not None:
                store = spec.stores[name]
                if store.kind != "key_value" or store.ttl_ms is not None:
                    kind = store.kind if store.ttl_ms is None else "key_value store with ttl_ms"
                    raise not_queryable(f"store '{name}' is a {kind}: queries read key-value stores and tables")
                return QueriedStore(name, spec.name, topic, resolve_serde(store.key_serde))
            if name in spec.tables and topic is not None:
                table = spec.tables[name]
                if table.history_ms is not None:
                    raise not_queryable(f"table '{name}' keeps history: queries read tables without history_ms")
                return QueriedStore(name, spec.name, topic, session.topic_serdes[table.topic][0])
        raise Unanswered(Reply(HTTPStatus.NOT_FOUND, {"error": f"no store '{name}' in app {self._config.app_id}"}))

    def _key(self, store: QueriedStore, text: str, request: QueryRequest, session: Session) -> Reply:
        try:
            key = store.key_bytes(text)
        except KeyNotEncodable as error:
            raise not_queryable(str(error)) from None
        partition = partition_for(key, session.partition_counts[store.topic])
        owner = self._owner(store, partition)
        if owner != self.address:
            return self._forwarded(owner, request, store, partition)
        return self._on_loop(session, self._read_key(store, partition, text, key, session))

    def _range(self, store: QueriedStore, request: QueryRequest, session: Session) -> Reply:
        """Every partition's pairs in the range, each partition's from its owner, with its offsets."""
        keys = KeyRange.asked(store, request.query)
        asked = request.query.get("partitions", [""])[0]
        try:
            partitions = (
                [int(p) for p in asked.split(",")] if asked else list(range(session.partition_counts[store.topic]))
            )
        except ValueError:
            raise not_queryable(f"partitions: '{asked}' is not partition numbers") from None
        by_owner: dict[str, list[int]] = {}
        for partition in partitions:
            owner = self._owner(store, partition)
            if owner != self.address and request.forwarded:
                raise not_owned(store, partition)
            by_owner.setdefault(owner, []).append(partition)
        answers = [self._on_loop(session, self._read_range(store, by_owner.pop(self.address, []), keys, session))]
        for owner, theirs in by_owner.items():
            query = urllib.parse.urlencode(keys.fields | {"partitions": ",".join(map(str, theirs))})
            answers.append(self._forwarded(owner, request, store, theirs[0], f"{request.path}?{query}"))
        for reply in answers:
            if reply.status != HTTPStatus.OK:
                return reply
        items = [item for reply in answers for item in reply.body["items"]]
        read = sorted((part for reply in answers for part in reply.body["partitions"]), key=lambda p: p["partition"])
        truncated = len(items) > self._max_items or any(reply.body["truncated"] for reply in answers)
        body = {"store": store.name, **keys.fields, "items": items[: self._max_items], "partitions": read}
        return Reply(HTTPStatus.OK, body | {"truncated": truncated})

    def _owner(self, store: QueriedStore, partition: int) -> str:
        owners = self.membership.owners
        if owners is None:
            raise unavailable(
                f"the group is rebalancing: partition {partition} of store '{store.name}' has no owner now"
            )
        owner = owners.get((store.topic, partition))
        if owner is None:
            raise unavailable(
                f"no worker with queries owns partition {partition} of store '{store.name}' (the group is rebalancing)"
            )
        return owner

    def _forwarded(
        self, owner: str, request: QueryRequest, store: QueriedStore, partition: int, path: str | None = None
    ) -> Reply:
        """The owner's answer, asked once: a worker asked on another's behalf answers itself or refuses."""
        if request.forwarded:
            raise not_owned(store, partition)
        headers = {FORWARDED: self.address}
        if request.authorization is not None:
            headers["Authorization"] = request.authorization
        url = f"http://{owner}{path or request.path}"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self._timeout_s) as reply:
                return Reply(HTTPStatus(reply.status), json.loads(reply.read()))
        except urllib.error.HTTPError as error:
            return Reply(HTTPStatus(error.code), json.loads(error.read() or b"{}"))
        except (OSError, ValueError) as error:
            raise unavailable(
                f"the owner of partition {partition} of store '{store.name}', {owner}, did not answer: {error}"
            ) from error

    def _on_loop(self, session: Session, read: Any) -> Reply:
        """The read, run on the worker's event loop: between two steps of the task, never inside a commit."""
        future = asyncio.run_coroutine_threadsafe(read, session.loop)
        try:
            reply: Reply = future.result(self._timeout_s)
        except TimeoutError:
            future.cancel()
            raise unavailable(f"the worker's event loop did not take the read within {self._timeout_s}s") from None
        return reply

    async def _read_key(self, store: QueriedStore, partition: int, text: str, key: bytes, session: Session) -> Reply:
        state = self._state(store, partition, session)
        value = state.stores[store.name].store.committed_get(key)
        body = {"store": store.name, "key": text, "partition": partition, "found": value is not None}
        body |= {"value": jsonable(value), "offsets": offsets(state.committed_offsets), "worker": self.address}
        return Reply(HTTPStatus.OK, body)

    async def _read_range(self, store: QueriedStore, partitions: list[int], keys: KeyRange, session: Session) -> Reply:
        items: list[dict[str, Any]] = []
        read: list[dict[str, Any]] = []
        truncated = False
        for partition in partitions:
            state = self._state(store, partition, session)
            pairs = state.stores[store.name].store.committed_range(keys.lower, keys.upper, self._max_items + 1)
            truncated = truncated or len(pairs) > self._max_items
            items += [
                {"key": jsonable(key), "value": jsonable(value), "partition": partition}
                for key, value in pairs[: self._max_items]
            ]
            read.append({"partition": partition, "offsets": offsets(state.committed_offsets), "worker": self.address})
        return Reply(HTTPStatus.OK, {"items": items, "partitions": read, "truncated": truncated})

    def _state(self, store: QueriedStore, partition: int, session: Session) -> TaskState:
        task = session.tasks.get(TaskId(store.processor, partition))
        if task is None or task.lost or task.phase is TaskPhase.CLOSED or task.state is None:
            raise not_owned(store, partition)
        if task.phase is not TaskPhase.RUNNING:
            raise unavailable(f"partition {partition} of store '{store.name}' is restoring on this worker")
        return task.state


def offsets(committed: Mapping[TopicPartition, int]) -> list[dict[str, Any]]:
    """The input offsets a read reflects: every record below each was processed into what it read."""
    return [
        {"topic": tp.topic, "partition": tp.partition, "offset": offset}
        for tp, offset in sorted(committed.items(), key=lambda item: (item[0].topic, item[0].partition))
    ]


def jsonable(value: Any) -> Any:
    """A decoded key or value as JSON takes it: bytes as text (UTF-8, undecodable bytes escaped)."""
    return json.loads(json.dumps(value, default=_plain))


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return str(value)


def unavailable(reason: str) -> Unanswered:
    return Unanswered(Reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": reason}))


def not_owned(store: QueriedStore, partition: int) -> Unanswered:
    return unavailable(f"this worker does not own partition {partition} of store '{store.name}' now (rebalancing)")


def not_queryable(reason: str) -> Unanswered:
    return Unanswered(Reply(HTTPStatus.BAD_REQUEST, {"error": reason}))
