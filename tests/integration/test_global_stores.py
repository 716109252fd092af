"""Global stores against a real broker (seed 000): the bootstrap barrier, following, persistence, bad rows."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from examples.acquirers.terminals import table_row
from runtime.config import AppConfig, parse_app
from runtime.global_stores import stores as global_stores
from runtime.telemetry import Telemetry
from runtime.worker.worker import Worker, WorkerFailed
from stores.snapshot import snapshot_manifest, write_manifest
from tests.conftest import TopicNamer
from tests.integration.test_telemetry import point_values, single
from tests.support.kafka_helpers import create_topic, produce, read_topic

pytestmark = pytest.mark.anyio

ACQUIRERS = ("ACQ-NORTH", "ACQ-SOUTH")
STORE = "terminal-acquirer"


def acquirer_of(n: int) -> str:
    return ACQUIRERS[n % 2]


def rows(count: int, start: int = 0, active: bool = True, acquirer: Any = acquirer_of) -> list[tuple[bytes, bytes]]:
    return [table_row(n, f"T{n:06d}", acquirer(n), active, 1_767_225_600_000 + n) for n in range(start, start + count)]


def payments(terminals: range) -> list[tuple[bytes, bytes]]:
    """Payment n is made at terminal n."""
    return [
        (f"p{n}".encode(), json.dumps({"payment_id": f"p{n}", "terminal_id": f"T{n:06d}", "amount_minor": n}).encode())
        for n in terminals
    ]


class Names:
    def __init__(self, topic_name: TopicNamer):
        self.app = topic_name("app")
        self.table, self.payments = topic_name("table"), topic_name("payments")
        self.north, self.south, self.unrouted = topic_name("north"), topic_name("south"), topic_name("unrouted")


def router_app(
    names: Names, state_dir: Path, backend: str = "rocksdb", snapshots: Path | None = None,
    consumer: dict[str, Any] | None = None,
) -> AppConfig:  # fmt: skip
    json_topic = {"partitions": 3, "key_serde": "str", "value_serde": "json"}
    global_store: dict[str, Any] = {
        "topic": names.table, "backend": backend, "key_serde": "str", "value_serde": "json",
        "updater": "examples.acquirers.terminals:ActiveTerminals", "errors": "dead_letter",
    }  # fmt: skip
    if snapshots is not None:
        global_store["snapshots"] = {"location": str(snapshots)}
    return parse_app({
        "app_id": names.app,
        "topics": {names.table: {**json_topic, "cleanup_policy": "compact"}, names.payments: json_topic,
                   names.north: json_topic, names.south: json_topic, names.unrouted: json_topic},
        "global_stores": {STORE: global_store},
        "processors": [{
            "name": "route", "class": "examples.acquirers.routing:RouteByAcquirer", "inputs": [names.payments],
            "outputs": [names.north, names.south, names.unrouted],
            "params": {"store": STORE, "routes": {"ACQ-NORTH": names.north, "ACQ-SOUTH": names.south},
                       "unrouted": names.unrouted},
        }],
        "state_dir": str(state_dir),
        "kafka": {"consumer": consumer or {}},
    })  # fmt: skip


async def prepare(bootstrap: str, names: Names) -> None:
    await create_topic(bootstrap, names.table, 3, {"cleanup.policy": "compact"})
    await create_topic(bootstrap, names.payments, 3)


async def test_no_payment_is_processed_before_the_table_is_read(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    await produce(kafka_bootstrap, names.table, rows(20_000))
    await produce(kafka_bootstrap, names.payments, payments(range(0, 20_000, 7)))

    worker = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    await worker.run()

    north, south = await read_topic(kafka_bootstrap, names.north), await read_topic(kafka_bootstrap, names.south)
    assert await read_topic(kafka_bootstrap, names.unrouted) == []  # the first payment found its terminal too
    routed = [json.loads(r.value) for r in north + south]
    assert len(routed) == len(range(0, 20_000, 7))
    for payment in routed:
        assert payment["acquirer_id"] == acquirer_of(int(payment["terminal_id"][1:]))
    assert worker.counters.global_records == 20_000
    assert worker.global_stores.bootstrap_seconds is not None


async def test_updates_and_deactivations_reach_processors_while_running(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    await produce(kafka_bootstrap, names.table, rows(100))
    worker = Worker(router_app(names, tmp_path, backend="memory"), kafka_bootstrap)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 60)
        view = worker.global_stores.views[STORE]
        assert view.get("T000003") == "ACQ-SOUTH"

        # T3 moves to the other acquirer, T4 is deactivated, T100 is new.
        started = time.monotonic()
        await produce(kafka_bootstrap, names.table, [
            table_row(3, "T000003", "ACQ-NORTH", True, 1), table_row(4, "T000004", "ACQ-NORTH", False, 1),
            table_row(100, "T000100", "ACQ-SOUTH", True, 1),
        ])  # fmt: skip
        while (view.get("T000003"), view.get("T000004"), view.get("T000100")) != ("ACQ-NORTH", None, "ACQ-SOUTH"):
            assert time.monotonic() - started < 5, "table changes not visible within 5 s"
            await asyncio.sleep(0.02)

        # And the processors see it: payments at T3, T4 and T100 now.
        await produce(kafka_bootstrap, names.payments, payments(range(3, 5)) + payments(range(100, 101)))
        deadline = time.monotonic() + 30
        while worker.counters.processed < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 60)
    by_terminal = {
        json.loads(r.value)["terminal_id"]: topic
        for topic in (names.north, names.south, names.unrouted)
        for r in await read_topic(kafka_bootstrap, topic)
    }
    assert by_terminal == {"T000003": names.north, "T000004": names.unrouted, "T000100": names.south}


async def test_restart_with_a_persistent_store_reads_only_new_rows(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    await produce(kafka_bootstrap, names.table, rows(5_000))
    first = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    await first.run()
    assert first.counters.global_records == 5_000

    await produce(kafka_bootstrap, names.table, rows(100, start=5_000) + rows(10, active=False))
    second = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    await second.run()
    assert second.counters.global_records == 110

    third = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    await third.run()
    assert third.counters.global_records == 0
    await produce(kafka_bootstrap, names.payments, payments(range(0, 5_100, 50)))
    fourth = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    await fourth.run()
    unrouted = {json.loads(r.value)["terminal_id"] for r in await read_topic(kafka_bootstrap, names.unrouted)}
    assert unrouted == {"T000000"}  # deactivated in the second run; T5000 and T5050 came in it


async def test_a_store_ahead_of_its_topic_is_read_again(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    await produce(kafka_bootstrap, names.table, rows(300))
    await Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True).run()

    # The table topic is recreated with fewer rows: the store's offsets are past its end.
    renamed = Names(topic_name)
    renamed.app, renamed.table = names.app, topic_name("table-again")
    await prepare(kafka_bootstrap, renamed)
    await produce(kafka_bootstrap, renamed.table, rows(10, acquirer=lambda n: "ACQ-NORTH"))
    again = Worker(router_app(renamed, tmp_path), kafka_bootstrap, until_caught_up=True)
    await again.run()
    assert again.counters.global_records == 10


async def test_a_malformed_row_is_recorded_and_the_store_goes_on(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    names = Names(topic_name)
    await create_topic(kafka_bootstrap, names.table, 1, {"cleanup.policy": "compact"})
    bad_json, bad_row = (b"T000007", b'{"id": 7, "terminalId": '), (b"T000008", b'{"id": 8}')
    await produce(kafka_bootstrap, names.table, [*rows(5), bad_json, bad_row, *rows(5, start=10)])
    worker = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.ready.wait(), 60)
    failures = worker.global_stores.failures(STORE)
    view = worker.global_stores.views[STORE]
    assert [view.get(f"T{n:06d}") for n in (4, 10, 14)] == ["ACQ-NORTH", "ACQ-NORTH", "ACQ-NORTH"]
    await asyncio.wait_for(running, 60)

    table = await read_topic(kafka_bootstrap, names.table)
    assert [(f.topic, f.partition, f.offset, f.timestamp, f.key) for f in failures] == [
        (names.table, 0, r.offset, r.timestamp, r.key) for r in table if r.key in (b"T000007", b"T000008")
    ]
    assert (
        failures[0].message.startswith("DecodeError: Input data was truncated")
        and "Traceback" in failures[0].stack_trace
    )
    assert failures[1].message == "KeyError: 'terminalId'" and "terminals.py" in failures[1].stack_trace
    written = datetime.fromtimestamp(failures[1].timestamp / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    assert (
        str(failures[1]) == f"{names.table}[0]@{failures[1].offset} ({written}) key=b'T000008': KeyError: 'terminalId'"
    )
    assert worker.counters.global_store_errors == 2

    letters = await read_topic(kafka_bootstrap, f"{names.app}-dead-letters")
    assert [(r.key, r.value) for r in letters] == [bad_json, bad_row]
    headers = dict(letters[0].headers)
    assert headers["error.stage"] == b"global-store update" and headers["error.processor"] == STORE.encode()
    assert headers["source.offset"] == str(failures[0].offset).encode()


async def test_a_large_table_is_read_by_reader_processes_with_the_same_results(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    monkeypatch.setattr(global_stores, "READ_IN_PROCESSES", 1_000)
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    bad_json, bad_row = (b"T000007", b'{"id": 7, "terminalId": '), (b"T000008", b'{"id": 8}')
    await produce(kafka_bootstrap, names.table, [*rows(3_000), bad_json, bad_row, *rows(5, active=False)])
    worker = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    with caplog.at_level(logging.INFO, logger="runtime.global_stores.stores"):
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(worker.ready.wait(), 60)
    assert "reader processes read 3007 records" in caplog.text
    view = worker.global_stores.views[STORE]
    assert [view.get(f"T{n:06d}") for n in (4, 5, 7, 8, 2_999)] == [None, "ACQ-SOUTH", "ACQ-SOUTH", "ACQ-NORTH",
                                                                     "ACQ-SOUTH"]  # fmt: skip
    failures = worker.global_stores.failures(STORE)
    await asyncio.wait_for(running, 60)

    assert sorted((f.key, f.message.split(":")[0]) for f in failures) == [
        (b"T000007", "DecodeError"), (b"T000008", "KeyError")
    ]  # fmt: skip
    assert all("Traceback" in f.stack_trace for f in failures)
    assert worker.counters.global_records == 3_007
    assert worker.counters.global_store_errors == 2
    letters = await read_topic(kafka_bootstrap, f"{names.app}-dead-letters")
    assert sorted((r.key, r.value) for r in letters) == [bad_json, bad_row]

    await produce(kafka_bootstrap, names.table, rows(100, start=3_000))
    restarted = Worker(router_app(names, tmp_path), kafka_bootstrap, until_caught_up=True)
    await restarted.run()
    assert restarted.counters.global_records == 100


async def test_readers_hand_a_rocksdb_store_sst_files_whose_later_changes_and_deletions_win(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of 400 records per SST file, from fetches of about a hundred: a row deactivated or moved in
    a later chunk than the one that wrote it must end deleted or moved, and a row written again after
    its deletion must be back."""
    monkeypatch.setattr(global_stores, "READ_IN_PROCESSES", 1_000)
    monkeypatch.setattr(global_stores, "SST_RECORDS", 400)
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    await produce(kafka_bootstrap, names.table, rows(3_000))
    await produce(kafka_bootstrap, names.table, rows(600, active=False))  # T000000..T000599 deleted
    await produce(kafka_bootstrap, names.table, rows(100, start=500, acquirer=lambda n: "ACQ-WEST"))  # back
    await produce(kafka_bootstrap, names.table, rows(200, start=2_800, acquirer=lambda n: "ACQ-EAST"))  # moved
    config = router_app(names, tmp_path, consumer={"max_partition_fetch_bytes": 16_384})
    worker = Worker(config, kafka_bootstrap, until_caught_up=True)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.ready.wait(), 60)
    view = worker.global_stores.views[STORE]
    expected = {n: None if n < 500 else "ACQ-WEST" if n < 600 else "ACQ-EAST" if n >= 2_800 else acquirer_of(n)
                for n in range(3_000)}  # fmt: skip
    assert {n: view.get(f"T{n:06d}") for n in range(3_000)} == expected
    await asyncio.wait_for(running, 60)
    assert worker.counters.global_records == 3_900
    assert not list((tmp_path / names.app / "global" / STORE).glob("*.incoming")), "the SST files are cleared away"


async def test_each_worker_holds_the_whole_table(kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path) -> None:
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    await produce(kafka_bootstrap, names.table, rows(1_000))
    await produce(kafka_bootstrap, names.payments, payments(range(0, 1_000, 3)))
    config = router_app(names, tmp_path)
    workers = [Worker(config, kafka_bootstrap, until_caught_up=True) for _ in range(2)]
    await asyncio.wait_for(asyncio.gather(*(worker.run() for worker in workers)), 120)

    for worker in workers:
        assert worker.counters.global_records == 1_000
    assert sorted(path.name for path in (tmp_path / names.app / "global" / STORE).iterdir()) == ["0", "1"]
    assert await read_topic(kafka_bootstrap, names.unrouted) == []
    routed = await read_topic(kafka_bootstrap, names.north) + await read_topic(kafka_bootstrap, names.south)
    assert len(routed) == len(range(0, 1_000, 3))


async def test_a_snapshot_of_another_app_is_refused(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    snapshots = tmp_path / "snapshots"
    manifest = snapshot_manifest([], app="someone-else", store=STORE, partitions=3, key_serde="str",
                                 value_serde="json", changelog_topic=names.table)  # fmt: skip
    write_manifest(snapshots / STORE / "dump", manifest)
    worker = Worker(router_app(names, tmp_path / "state", snapshots=snapshots), kafka_bootstrap, until_caught_up=True)
    with pytest.raises(WorkerFailed, match=r"global store terminal-acquirer: refusing snapshot .* app='someone-else'"):
        await worker.run()


async def test_metrics_show_positions_end_offsets_lag_errors_and_bootstrap_time(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    names = Names(topic_name)
    await prepare(kafka_bootstrap, names)
    await produce(kafka_bootstrap, names.table, [*rows(300), (b"T999999", b"not json")])
    config = router_app(names, tmp_path)
    reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
    telemetry = Telemetry(config.telemetry, config.app_id, span_exporter=spans, metric_reader=reader)
    await asyncio.wait_for(Worker(config, kafka_bootstrap, until_caught_up=True, telemetry=telemetry).run(), 120)

    table = await read_topic(kafka_bootstrap, names.table)
    ends = {p: max(r.offset for r in table if r.partition == p) + 1 for p in {r.partition for r in table}}
    values = point_values(reader)
    for name in ("kafka_actor.global_store.position", "kafka_actor.global_store.end_offset"):
        by_partition = {int(a["messaging.destination.partition.id"]): v for a, v in values[name]}
        assert by_partition == ends, name
    assert {a["messaging.destination.name"] for a, _ in values["kafka_actor.global_store.lag"]} == {names.table}
    assert all(lag == 0 for _, lag in values["kafka_actor.global_store.lag"])
    assert single(values, "kafka_actor.global_store.records") == 301
    assert single(values, "kafka_actor.global_store.errors") == 1
    assert single(values, "kafka_actor.global_store.bootstrap.time") > 0
    (bootstrap,) = [span for span in spans.get_finished_spans() if span.name == "global-store bootstrap"]
    assert tuple((bootstrap.attributes or {})["kafka_actor.global_stores"]) == (STORE,)  # type: ignore[arg-type]
