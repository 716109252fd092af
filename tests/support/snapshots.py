"""Snapshot restores in tests: a counting app with a snapshot location, changelogs of puts and deletes,
snapshots written from a changelog without Spark, and the stores a restore left on disk."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import msgpack

from runtime.config import parse_app
from runtime.worker.worker import Worker
from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest, snapshot_manifest, write_manifest, write_partition
from tests.support.kafka_helpers import read_topic

PARTITIONS = 3
STORE = "counts"

Change = tuple[bytes, bytes | None]


def snapshot_app(
    app_id: str, source: str, sink: str, state_dir: Path, snapshots: Path | str | None, partitions: int = PARTITIONS
) -> dict[str, Any]:
    app: dict[str, Any] = {
        "app_id": app_id,
        "topics": {source: {"partitions": partitions, "key_serde": "str"},
                   sink: {"partitions": partitions, "key_serde": "str"}},
        "processors": [
            {"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [source], "outputs": [sink],
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


def write_snapshot(directory: Path, identity: dict[str, Any], live: dict[int, dict[bytes, bytes]]) -> Manifest:
    written = [write_partition(directory, partition, sorted(values.items())) for partition, values in live.items()]
    manifest = snapshot_manifest(written, **identity)
    write_manifest(directory, manifest)
    return manifest


def store_contents(
    state_dir: Path, app_id: str, partitions: int = PARTITIONS
) -> dict[int, tuple[list[tuple[bytes, bytes]], int | None]]:
    contents = {}
    for partition in range(partitions):
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
