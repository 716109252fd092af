"""A worker's part in the app's checkpoints, without a broker: which checkpoints are due (one per period,
one per request), each task's partitions added once, the manifest once all are there, and the oldest
beyond `keep` deleted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from runtime.config import parse_app
from runtime.guarantees.store_checkpoints import StoreCheckpoints, checkpoint_name, request_key
from stores.rocksdb import RocksDBBackend
from stores.snapshot import read_manifest
from stores.snapshot_storage import DirectoryStorage

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self, now_ms: int):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def app(location: Path, every: str | None) -> Any:
    snapshots: dict[str, Any] = {"location": str(location), "keep": 2}
    if every is not None:
        snapshots["every"] = every
    return parse_app({
        "app_id": "bank", "snapshots": snapshots,
        "topics": {"payments": {"partitions": 2}, "totals": {"partitions": 2}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["payments"],
                        "outputs": ["totals"], "params": {"output": "totals"}, "stores": {"counts": {}}}],
    })  # fmt: skip


def task(config: Any, tmp_path: Path, partition: int, rows: list[tuple[bytes, bytes]]) -> Any:
    """A task of `count` whose store holds `rows`, as the worker's commit protocol sees it."""
    backend = RocksDBBackend(tmp_path / f"store-{partition}")
    backend.write(rows, len(rows))
    entry = SimpleNamespace(name="counts", spec=config.processors[0].stores["counts"], backend=backend,
                            changelog=TopicPartition("bank-counts-changelog", partition),
                            snapshots=config.snapshots, mirrors_input=False)  # fmt: skip
    state = SimpleNamespace(stores={"counts": entry}, partition=partition)
    return SimpleNamespace(state=state, id=SimpleNamespace(processor="count", partition=partition),
                           group_inputs=frozenset({TopicPartition("payments", partition)}))  # fmt: skip


def offsets(partition: int, offset: int) -> dict[TopicPartition, int]:
    return {TopicPartition("payments", partition): offset}


async def test_every_period_makes_one_checkpoint_of_every_partition_and_keeps_the_newest(tmp_path: Path) -> None:
    config = app(tmp_path / "location", "10s")
    clock = Clock(1_795_000_000_000)
    checkpoints = StoreCheckpoints(config, {"payments": 2}, clock)
    tasks = [task(config, tmp_path, 0, [(b"a", b"1")]), task(config, tmp_path, 1, [(b"b", b"2"), (b"c", b"3")])]
    first = tmp_path / "location" / "counts" / checkpoint_name(1_795_000_000_000)
    checkpoints.after_commit(tasks[0], offsets(0, 40))
    await checkpoints.finish()
    assert (first / "partition-0.json").is_file() and not (first / "manifest.json").exists()
    checkpoints.after_commit(tasks[0], offsets(0, 41))  # its part is taken: not again in the same period
    checkpoints.after_commit(tasks[1], offsets(1, 7))
    await checkpoints.finish()
    manifest = read_manifest(first)
    assert manifest.input_offsets == {0: {"payments": 40}, 1: {"payments": 7}}
    assert (manifest.row_counts, manifest.changelog_offsets) == ({0: 1, 1: 2}, {0: 1, 1: 2})
    abandoned = tmp_path / "location" / "counts" / checkpoint_name(1_795_000_005_000)
    abandoned.mkdir()  # a part was being written when its worker died: it never completes
    for period in (1, 2):
        clock.now_ms += 10_000
        for partition, each in enumerate(tasks):
            checkpoints.after_commit(each, offsets(partition, 100 * period))
        await checkpoints.finish()
    kept = sorted(path.name for path in (tmp_path / "location" / "counts").iterdir())
    assert kept == [checkpoint_name(1_795_000_010_000), checkpoint_name(1_795_000_020_000), "_shared"]  # keep: 2,
    # and no incomplete one older than the newest complete one
    named = [read_manifest(tmp_path / "location" / "counts" / name).files for name in kept[:2]]
    for partition in (0, 1):
        stored = {
            path.name for path in (tmp_path / "location" / "counts" / "_shared" / f"partition-{partition}").iterdir()
        }
        wanted = {Path(file.key).name for files in named for file in files[partition]}
        # partition 1 completed the last checkpoint, pruned the first and then its own files; partition 0's
        # unnamed files go at its next checkpoint
        assert stored == wanted if partition == 1 else stored >= wanted


async def test_a_request_is_taken_without_a_schedule_and_a_task_missing_an_input_offset_waits(tmp_path: Path) -> None:
    config = app(tmp_path / "location", None)
    checkpoints = StoreCheckpoints(config, {"payments": 2}, Clock(1_795_000_000_000))
    tasks = [task(config, tmp_path, 0, [(b"a", b"1")]), task(config, tmp_path, 1, [])]
    checkpoints.after_commit(tasks[0], offsets(0, 5))
    assert not (tmp_path / "location" / "counts").exists()  # nothing due: no schedule, no request
    DirectoryStorage(tmp_path / "location").write_bytes(request_key("20261126T080000Z"), b"")
    checkpoints = StoreCheckpoints(config, {"payments": 2}, Clock(1_795_000_000_000))
    checkpoints.after_commit(tasks[1], {})  # knows no offset of its input yet: takes part later
    await checkpoints.finish()  # the requests are listed off the event loop
    checkpoints.after_commit(tasks[0], offsets(0, 5))
    checkpoints.after_commit(tasks[1], offsets(1, 0))
    await checkpoints.finish()
    manifest = read_manifest(tmp_path / "location" / "counts" / "20261126T080000Z")
    assert manifest.input_offsets == {0: {"payments": 5}, 1: {"payments": 0}}
