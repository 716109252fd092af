"""Restores from snapshots against a real broker: snapshot plus changelog tail equals the full changelog.

The snapshots here are written without Spark (stores/snapshot.py writes SSTs directly) from the
changelog as read back from the broker; test_spark_snapshot.py restores from one the Spark job made.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.worker import Worker
from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest, sha256_file, write_manifest, write_partition_sst
from tests.conftest import TopicNamer
from tests.integration.running import spawn_worker, write_app
from tests.kafka_helpers import create_topic, produce, read_topic

pytestmark = pytest.mark.anyio

PARTITIONS = 3
STORE = "counts"

Change = tuple[bytes, bytes | None]


def snapshot_app(app_id: str, source: str, sink: str, state_dir: Path, snapshots: Path | None) -> dict[str, Any]:
    app: dict[str, Any] = {
        "app_id": app_id,
        "topics": {source: {"partitions": PARTITIONS, "key_serde": "str"},
                   sink: {"partitions": PARTITIONS, "key_serde": "str"}},
        "processors": [
            {"name": "count", "class": "tests.integration.apps:CountPerKey", "inputs": [source], "outputs": [sink],
             "params": {"output": sink}, "stores": {STORE: {"backend": "rocksdb"}}}
        ],
        "state_dir": str(state_dir),
        "commit_interval_ms": 200,
    }  # fmt: skip
    if snapshots is not None:
        app["snapshots"] = {"location": str(snapshots)}
    return app


def changes(seed: int, count: int) -> list[Change]:
    """Puts and deletes of 400 keys (msgpack, as the store writes them): keys come, change, go, come back."""
    generator = random.Random(seed)
    records: list[Change] = []
    for step in range(count):
        key = msgpack.packb(f"key-{generator.randrange(400)}")
        records.append((key, None if generator.random() < 0.25 else msgpack.packb(step)))
    return records


async def latest_per_partition(bootstrap: str, topic: str) -> tuple[dict[int, dict[bytes, bytes]], dict[int, int]]:
    """Each partition's live keys as of now, and the offset after its last record."""
    latest: dict[int, dict[bytes, bytes | None]] = {p: {} for p in range(PARTITIONS)}
    ends = dict.fromkeys(range(PARTITIONS), 0)
    for record in await read_topic(bootstrap, topic):
        assert record.key is not None
        latest[record.partition][record.key] = record.value
        ends[record.partition] = record.offset + 1
    live = {p: {k: v for k, v in values.items() if v is not None} for p, values in latest.items()}
    return live, ends


def write_snapshot(directory: Path, manifest_fields: dict[str, Any], live: dict[int, dict[bytes, bytes]]) -> Manifest:
    checksums, rows = {}, {}
    for partition, values in live.items():
        sst = directory / f"partition-{partition}" / "000000.sst"
        rows[partition] = write_partition_sst(sorted(values.items()), sst)
        if rows[partition]:
            checksums[sst.relative_to(directory).as_posix()] = sha256_file(sst)
    manifest = Manifest.model_validate({**manifest_fields, "row_counts": rows, "checksums": checksums})
    write_manifest(directory, manifest)
    return manifest


def store_contents(state_dir: Path, app_id: str) -> dict[int, tuple[list[tuple[bytes, bytes]], int | None]]:
    contents = {}
    for partition in range(PARTITIONS):
        backend = RocksDBBackend(state_dir / app_id / STORE / str(partition))
        try:
            contents[partition] = (list(backend.items()), backend.changelog_offset())
        finally:
            backend.close()
    return contents


async def restore_only(app: dict[str, Any], bootstrap: str) -> Worker:
    """Run the app over its empty input: its tasks restore their stores, then it exits."""
    worker = Worker(parse_app(app), bootstrap, until_caught_up=True)
    await asyncio.wait_for(worker.run(), 120)
    return worker


async def test_snapshot_plus_tail_equals_full_changelog_and_replays_only_the_tail(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app_id, source, sink = topic_name("app"), topic_name("in"), topic_name("out")
    changelog = f"{app_id}-{STORE}-changelog"
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    await create_topic(kafka_bootstrap, changelog, PARTITIONS, {"cleanup.policy": "compact"})
    await produce(kafka_bootstrap, changelog, changes(1, 4000))
    live, offsets = await latest_per_partition(kafka_bootstrap, changelog)
    identity = {"app": app_id, "store": STORE, "partitions": PARTITIONS, "key_serde": "msgpack",
                "value_serde": "msgpack", "changelog_topic": changelog}  # fmt: skip
    manifest = write_snapshot(tmp_path / "snapshots" / STORE / "1", {**identity, "changelog_offsets": offsets}, live)
    tail = changes(2, 1500)  # updates and deletes after the snapshot, of keys in it and not
    await produce(kafka_bootstrap, changelog, tail)
    expected, ends = await latest_per_partition(kafka_bootstrap, changelog)

    full = await restore_only(snapshot_app(app_id, source, sink, tmp_path / "full", None), kafka_bootstrap)
    assert full.counters.restored == 4000 + len(tail)
    assert full.counters.snapshot_ingests == 0
    from_snapshot = await restore_only(
        snapshot_app(app_id, source, sink, tmp_path / "fast", tmp_path / "snapshots"), kafka_bootstrap
    )
    assert from_snapshot.counters.snapshot_ingests == PARTITIONS
    assert from_snapshot.counters.snapshot_rows == sum(manifest.row_counts.values()) > 0
    assert from_snapshot.counters.restored == sum(ends[p] - offsets[p] for p in range(PARTITIONS)) == len(tail)

    restored_fully = store_contents(tmp_path / "full", app_id)
    restored_fast = store_contents(tmp_path / "fast", app_id)
    assert restored_fast == restored_fully
    for partition in range(PARTITIONS):
        assert restored_fast[partition] == (sorted(expected[partition].items()), ends[partition])

    # A store already past the snapshot keeps its data and replays nothing.
    ahead = await restore_only(
        snapshot_app(app_id, source, sink, tmp_path / "full", tmp_path / "snapshots"), kafka_bootstrap
    )
    assert (ahead.counters.snapshot_ingests, ahead.counters.restored) == (0, 0)
    assert store_contents(tmp_path / "full", app_id) == restored_fully


async def test_a_store_behind_the_snapshot_is_replaced_by_it(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app_id, source, sink = topic_name("app"), topic_name("in"), topic_name("out")
    changelog = f"{app_id}-{STORE}-changelog"
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    await create_topic(kafka_bootstrap, changelog, PARTITIONS, {"cleanup.policy": "compact"})
    await produce(kafka_bootstrap, changelog, changes(3, 1000))
    await restore_only(snapshot_app(app_id, source, sink, tmp_path / "state", None), kafka_bootstrap)
    await produce(kafka_bootstrap, changelog, changes(4, 1000))
    live, offsets = await latest_per_partition(kafka_bootstrap, changelog)
    identity = {"app": app_id, "store": STORE, "partitions": PARTITIONS, "key_serde": "msgpack",
                "value_serde": "msgpack", "changelog_topic": changelog}  # fmt: skip
    write_snapshot(tmp_path / "snapshots" / STORE / "1", {**identity, "changelog_offsets": offsets}, live)

    worker = await restore_only(
        snapshot_app(app_id, source, sink, tmp_path / "state", tmp_path / "snapshots"), kafka_bootstrap
    )
    assert (worker.counters.snapshot_ingests, worker.counters.restored) == (PARTITIONS, 0)
    contents = store_contents(tmp_path / "state", app_id)
    assert contents == {p: (sorted(live[p].items()), offsets[p]) for p in range(PARTITIONS)}


@pytest.mark.parametrize(
    ("field", "wrong"),
    [
        ("app", "another-app"),
        ("store", "another-store"),
        ("key_serde", "str"),
        ("partitions", PARTITIONS + 1),
        ("changelog_topic", "another-changelog"),
    ],
)
async def test_a_manifest_of_another_app_store_serde_partitioning_or_changelog_is_refused(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, field: str, wrong: object
) -> None:
    app_id, source, sink = topic_name("app"), topic_name("in"), topic_name("out")
    changelog = f"{app_id}-{STORE}-changelog"
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    await create_topic(kafka_bootstrap, changelog, PARTITIONS, {"cleanup.policy": "compact"})
    await produce(kafka_bootstrap, changelog, changes(5, 300))
    live, offsets = await latest_per_partition(kafka_bootstrap, changelog)
    identity = {"app": app_id, "store": STORE, "partitions": PARTITIONS, "key_serde": "msgpack",
                "value_serde": "msgpack", "changelog_topic": changelog, "changelog_offsets": offsets}  # fmt: skip
    if field == "partitions":
        live[PARTITIONS] = {}
    write_snapshot(tmp_path / "snapshots" / STORE / "1", {**identity, field: wrong}, live)
    app = snapshot_app(app_id, source, sink, tmp_path / "state", tmp_path / "snapshots")
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    log = tmp_path / "worker.log"
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
    assert worker.wait(timeout=120) == 1
    output = log.read_text()
    assert f"error: store {STORE}: refusing snapshot {tmp_path / 'snapshots' / STORE / '1'}: " in output, output
    assert f"has {field}={wrong!r}, expected {identity[field]!r}" in output, output
    assert "Traceback" not in output, "a refused snapshot is a message, not a stack trace"
