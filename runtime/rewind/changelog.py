"""A store's changelog made to agree with a checkpoint, so that no restore brings the rewound-away state back.

After a rewind a store's changelog still holds the changes made after the checkpoint, and a store is
rebuilt from its changelog: from the beginning, from a snapshot's offset, or from a local copy's. So,
for each partition, the changelog is read from the checkpoint's offset to its end, each key changed there
noted, and for each one record appended: the checkpoint's value, or a tombstone when the checkpoint does
not hold the key. Wherever a restore starts, from the checkpoint, from a later one, from a local store
at any offset or from nothing, these records come last, and it ends with the checkpoint's state.

Then the changelog's end holds the checkpoint's state exactly, so the checkpoint is carried forward to it
(stores/checkpoint.py, `carry_forward`): a snapshot of the same files covering the changelog up to its
end, which a store restores from without replaying the tail (the changes and their corrections).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stores.checkpoint import fetch_database
from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest, ingest_partition, partition_checksums
from stores.snapshot_storage import SnapshotStorage

Correction = tuple[bytes, bytes | None]  # a key, and its value in the checkpoint (None: not there)


async def changed_keys(
    consumer: AIOKafkaConsumer, starts: dict[TopicPartition, int]
) -> dict[TopicPartition, set[bytes]]:
    """The keys of each changelog partition's records from its start to its end now (read committed), all
    partitions read together: one consumer moved from partition to partition waits out a fetch each time."""
    ends = await consumer.end_offsets(list(starts))
    reading = {tp: start for tp, start in starts.items() if start < ends[tp]}
    keys: dict[TopicPartition, set[bytes]] = {tp: set() for tp in starts}
    if not reading:
        return keys
    consumer.assign(list(reading))
    for tp, start in reading.items():
        consumer.seek(tp, start)
    while [tp for tp in reading if await consumer.position(tp) < ends[tp]]:
        for tp, records in (await consumer.getmany(timeout_ms=500)).items():
            keys[tp].update(record.key for record in records if record.offset < ends[tp] and record.key is not None)
    return keys


def checkpoint_values(
    storage: SnapshotStorage, checkpoint: str, manifest: Manifest, partition: int, keys: set[bytes]
) -> list[Correction]:
    """Each key's value in the checkpoint's partition, or None; in key order."""
    with tempfile.TemporaryDirectory(prefix="rewind-") as scratch:
        store = _partition_store(storage, checkpoint, manifest, partition, Path(scratch) / "store")
        try:
            return [(key, store.get(key)) for key in sorted(keys)]
        finally:
            store.close()


def _partition_store(
    storage: SnapshotStorage, checkpoint: str, manifest: Manifest, partition: int, directory: Path
) -> RocksDBBackend:
    """The checkpoint's partition as a store in `directory`: its database's files fetched, or its SST ingested."""
    files = manifest.files.get(partition)
    if files is not None:
        fetch_database(storage, checkpoint, files, directory)
        return RocksDBBackend(directory)
    store = RocksDBBackend(directory)
    try:
        with storage.local_files(checkpoint, partition_checksums(manifest, partition)) as snapshot:
            ingest_partition(store, snapshot, manifest, partition)
    except BaseException:
        store.close()
        raise
    return store


async def corrections(
    consumer: AIOKafkaConsumer, storage: SnapshotStorage, checkpoint: str, manifest: Manifest
) -> dict[TopicPartition, list[Correction]]:
    """What each partition of the store's changelog needs to agree with the checkpoint at `checkpoint`."""
    assert manifest.changelog_topic is not None
    starts = {TopicPartition(manifest.changelog_topic, p): manifest.offset(p) for p in range(manifest.partitions)}
    changed = await changed_keys(consumer, starts)
    return {
        tp: checkpoint_values(storage, checkpoint, manifest, tp.partition, keys) for tp, keys in changed.items() if keys
    }


async def ends(consumer: AIOKafkaConsumer, manifest: Manifest) -> dict[int, int]:
    """The end offset of each partition of the store's changelog now."""
    assert manifest.changelog_topic is not None
    tps = [TopicPartition(manifest.changelog_topic, partition) for partition in range(manifest.partitions)]
    return {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}


async def append(producer: AIOKafkaProducer, tp: TopicPartition, records: list[Correction]) -> None:
    """The corrections, to the partition, in batches (a send per record costs many times more), acknowledged."""
    sent = []
    batch = producer.create_batch()
    for key, value in records:
        if batch.append(key=key, value=value, timestamp=None) is None:
            sent.append(await producer.send_batch(batch, tp.topic, partition=tp.partition))
            batch = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)
    if batch.record_count():
        sent.append(await producer.send_batch(batch, tp.topic, partition=tp.partition))
    await asyncio.gather(*sent)
