"""Window and session stores against a real broker: what a processor wrote, and the stream time, come
back whole when the state directory is lost, and expired entries leave the store and get tombstones
in the changelog."""

from __future__ import annotations

import asyncio
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.worker.worker import Worker, WorkerFailed
from stores import BufferedKeyValueStore, RocksDBBackend, SessionView, WindowByTimeView, WindowView
from stores.expiring import EXPIRY_STEPS
from stores.layout import INDEX, MAX_TIME, MIN_TIME, WINDOW_BY_TIME, session_of_index, window_of_index
from stores.partitioner import partition_for
from stores.serdes import BytesSerde, StrSerde
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.snapshots import write_snapshot

pytestmark = pytest.mark.anyio

PARTITIONS = 2
SIZE_MS, GAP_MS, RETENTION_MS = 100, 40, 1000
Entries = dict[tuple[Any, ...], int]  # windows: (key, start); sessions: (key, start, end) -> count


def timed_records(count: int, seed: int) -> list[tuple[str, int]]:
    """(key, event time): time moves on a few ms a record; one in 20 is late, one in 100 beyond the retention."""
    generator = random.Random(seed)
    records, clock = [], 0
    for _ in range(count):
        clock += generator.randrange(6)
        roll = generator.random()
        late = 1500 if roll < 0.01 else 300 if roll < 0.05 else 0
        records.append((f"user-{generator.randrange(13)}", max(clock - late, 0)))
    return records


def by_partition(records: list[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
    """Each task's records in the order it processes them."""
    split: dict[int, list[tuple[str, int]]] = {partition: [] for partition in range(PARTITIONS)}
    for key, time in records:
        split[partition_for(key.encode(), PARTITIONS)].append((key, time))
    return split


def expected_windows(records: list[tuple[str, int]]) -> tuple[Entries, int]:
    """What `CountPerWindow` leaves in one task's store: counts of the windows not expired, and the stream time."""
    windows: Entries = {}
    stream_time = -1
    for key, time in records:
        stream_time = max(stream_time, time)
        start = time - time % SIZE_MS
        if start >= stream_time - RETENTION_MS:
            windows[key, start] = windows.get((key, start), 0) + 1
    return {window: n for window, n in windows.items() if window[1] >= stream_time - RETENTION_MS}, stream_time


def expected_sessions(records: list[tuple[str, int]]) -> tuple[Entries, int]:
    """What `CountPerSession` leaves in one task's store."""
    sessions: Entries = {}
    stream_time = -1
    for key, time in records:
        stream_time = max(stream_time, time)
        cutoff = stream_time - RETENTION_MS
        sessions = {session: n for session, n in sessions.items() if session[2] >= cutoff}
        start, end, count = time, time, 1
        for session in [s for s in sessions if s[0] == key and s[2] >= time - GAP_MS and s[1] <= time + GAP_MS]:
            start, end, count = min(start, session[1]), max(end, session[2]), count + sessions.pop(session)
        if end >= cutoff:
            sessions[key, start, end] = count
    return sessions, stream_time


@dataclass(frozen=True)
class Kind:
    store: str
    processor: str
    params: dict[str, int]
    view: Callable[[BufferedKeyValueStore], WindowView | SessionView]
    expected: Callable[[list[tuple[str, int]]], tuple[Entries, int]]
    expires_by: Callable[[bytes], int]  # the time in a key of `by_time` that expiry goes by
    by_time: bytes = INDEX  # the tag of the keys in time order


def window_contents(view: WindowView | SessionView) -> Entries:
    return {tuple(entry[:-1]): entry[-1] for entry in view.fetch_all(MIN_TIME, MAX_TIME)}


KINDS = {
    "window": Kind("windows", "tests.support.apps:CountPerWindow", {"size_ms": SIZE_MS},
                   lambda raw: WindowView(raw, RETENTION_MS, StrSerde()), expected_windows,
                   lambda index: window_of_index(index)[1]),
    "window_by_time": Kind("windows", "tests.support.apps:CountPerWindow", {"size_ms": SIZE_MS},
                           lambda raw: WindowByTimeView(raw, RETENTION_MS, StrSerde()), expected_windows,
                           lambda entry: window_of_index(entry)[1], WINDOW_BY_TIME),
    "session": Kind("sessions", "tests.support.apps:CountPerSession", {"gap_ms": GAP_MS},
                    lambda raw: SessionView(raw, RETENTION_MS, StrSerde()), expected_sessions,
                    lambda index: session_of_index(index)[2]),
}  # fmt: skip


def app(kind: str, app_id: str, source: str, state_dir: Path) -> dict[str, Any]:
    spec = KINDS[kind]
    return {
        "app_id": app_id,
        "topics": {source: {"partitions": PARTITIONS, "key_serde": "str"}},
        "processors": [
            {"name": "count", "class": spec.processor, "inputs": [source], "params": spec.params,
             "stores": {spec.store: {"kind": kind, "retention_ms": RETENTION_MS, "key_serde": "str"}}}
        ],
        "state_dir": str(state_dir),
        "commit_interval_ms": 200,
    }  # fmt: skip


@dataclass(frozen=True)
class Stored:
    """One task's store as the worker left it: its bytes and offset, and what the view shows."""

    items: list[tuple[bytes, bytes]]
    offset: int | None
    contents: Entries
    stream_time: int


def stored(kind: str, state_dir: Path, app_id: str) -> dict[int, Stored]:
    spec = KINDS[kind]
    found = {}
    for partition in range(PARTITIONS):
        backend = RocksDBBackend(state_dir / app_id / spec.store / str(partition))
        try:
            view = spec.view(BufferedKeyValueStore(backend, BytesSerde(), BytesSerde()))
            found[partition] = Stored(
                list(backend.items()), backend.changelog_offset(), window_contents(view), view.stream_time
            )
        finally:
            backend.close()
    return found


async def run_until_caught_up(config: dict[str, Any], bootstrap: str) -> Worker:
    worker = Worker(parse_app(config), bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), 120)
    return worker


@pytest.mark.parametrize("kind", KINDS)
async def test_a_lost_state_dir_restores_the_same_entries_and_stream_time(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, kind: str
) -> None:
    spec = KINDS[kind]
    app_id, source = topic_name("app"), topic_name("in")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    records = timed_records(3000, seed=18)
    await produce(kafka_bootstrap, source, [(key.encode(), msgpack.packb({"t": time})) for key, time in records])
    config = app(kind, app_id, source, tmp_path / "state")
    await run_until_caught_up(config, kafka_bootstrap)

    first = stored(kind, tmp_path / "state", app_id)
    for partition, tasks_records in by_partition(records).items():
        entries, stream_time = spec.expected(tasks_records)
        assert (first[partition].contents, first[partition].stream_time) == (entries, stream_time)
        assert len(entries) > 10
    shutil.rmtree(tmp_path / "state")
    second = await run_until_caught_up(config, kafka_bootstrap)
    assert second.counters.restored > 0
    assert stored(kind, tmp_path / "state", app_id) == first, "the same bytes, offset, entries and stream time"

    # Expired entries left the store and their changelog records end in tombstones.
    changelog = await read_topic(kafka_bootstrap, f"{app_id}-{spec.store}-changelog")
    latest: dict[int, dict[bytes, bytes | None]] = {partition: {} for partition in range(PARTITIONS)}
    for record in changelog:
        assert record.key is not None
        latest[record.partition][record.key] = record.value
    for partition, task in first.items():
        assert {key: value for key, value in latest[partition].items() if value is not None} == dict(task.items)
        removed_below = task.stream_time - RETENTION_MS - RETENTION_MS // EXPIRY_STEPS
        by_time = [key for key in latest[partition] if key.startswith(spec.by_time)]
        expired = [key for key in by_time if spec.expires_by(key) < removed_below]
        assert len(expired) > len(by_time) // 2, "most entries written have expired"
        assert all(latest[partition][key] is None for key in expired)
        assert all(spec.expires_by(key) >= removed_below for key, _ in task.items if key.startswith(spec.by_time))


async def test_a_snapshot_of_key_value_rows_is_refused_for_a_window_store(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """A bootstrap from bulk data writes rows as a key-value store holds them, not in the window layout."""
    app_id, source = topic_name("app"), topic_name("in")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    rows = {partition: {b"user-1": msgpack.packb(5)} for partition in range(PARTITIONS)}
    identity = {"app": app_id, "store": "windows", "partitions": PARTITIONS, "key_serde": "str",
                "value_serde": "msgpack"}  # fmt: skip
    write_snapshot(tmp_path / "snapshots" / "windows" / "bootstrap", identity, rows)
    config = {
        **app("window", app_id, source, tmp_path / "state"),
        "snapshots": {"location": str(tmp_path / "snapshots")},
    }
    with pytest.raises(WorkerFailed, match=r"has kind='key_value', expected 'window' \(rows from bulk data make key"):
        await run_until_caught_up(config, kafka_bootstrap)


async def test_a_store_restored_into_another_kind_stops_the_worker(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """A processor that declared its store `window`, then `window_by_time`: the changelog holds the other
    layout's keys, which the new kind would never read or expire."""
    app_id, source = topic_name("app"), topic_name("in")
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    records = timed_records(200, seed=3)
    await produce(kafka_bootstrap, source, [(key.encode(), msgpack.packb({"t": time})) for key, time in records])
    await run_until_caught_up(app("window", app_id, source, tmp_path / "state"), kafka_bootstrap)
    shutil.rmtree(tmp_path / "state")
    changed = app("window_by_time", app_id, source, tmp_path / "state")
    with pytest.raises(WorkerFailed, match=r"store 'windows' holds entries laid out for another kind than window_by"):
        await run_until_caught_up(changed, kafka_bootstrap)
