"""Restores from snapshots against a real broker: snapshot plus changelog tail equals the full changelog.

The snapshots here are written without Spark (stores/snapshot.py writes SSTs directly) from the
changelog as read back from the broker; test_spark_snapshot.py restores from one the Spark job made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.worker.worker import WorkerFailed
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce
from tests.support.running import spawn_worker, write_app
from tests.support.snapshots import (
    PARTITIONS,
    STORE,
    changes,
    latest_per_partition,
    restore_only,
    snapshot_app,
    store_contents,
    write_snapshot,
)

pytestmark = pytest.mark.anyio


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
    assert from_snapshot.counters.snapshot_records_spared == sum(offsets.values()) == 4000  # the changelog's start: 0

    restored_fully = store_contents(tmp_path / "full", app_id)
    restored_fast = store_contents(tmp_path / "fast", app_id)
    assert restored_fast == restored_fully
    for partition in range(PARTITIONS):
        assert restored_fast[partition] == (sorted(expected[partition].items()), ends[partition])

    # A store already past the snapshot keeps its data and replays nothing.
    ahead = await restore_only(
        snapshot_app(app_id, source, sink, tmp_path / "full", tmp_path / "snapshots"), kafka_bootstrap
    )
    assert (ahead.counters.snapshot_ingests, ahead.counters.restored, ahead.counters.snapshot_records_spared) == (
        0,
        0,
        0,
    )
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


async def test_a_snapshot_past_the_end_of_the_changelog_is_refused(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app_id, source, sink = topic_name("app"), topic_name("in"), topic_name("out")
    changelog = f"{app_id}-{STORE}-changelog"
    await create_topic(kafka_bootstrap, source, PARTITIONS)
    await create_topic(kafka_bootstrap, changelog, PARTITIONS, {"cleanup.policy": "compact"})
    await produce(kafka_bootstrap, changelog, changes(6, 300))
    live, offsets = await latest_per_partition(kafka_bootstrap, changelog)
    beyond = {partition: offset + 1000 for partition, offset in offsets.items()}  # as of a deleted, older changelog
    identity = {"app": app_id, "store": STORE, "partitions": PARTITIONS, "key_serde": "msgpack",
                "value_serde": "msgpack", "changelog_topic": changelog, "changelog_offsets": beyond}  # fmt: skip
    write_snapshot(tmp_path / "snapshots" / STORE / "1", identity, live)
    app = snapshot_app(app_id, source, sink, tmp_path / "state", tmp_path / "snapshots")
    with pytest.raises(WorkerFailed, match=r"refusing snapshot .* but the changelog ends at \d+"):
        await restore_only(app, kafka_bootstrap)
