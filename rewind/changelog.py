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

import tempfile
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stores.rocksdb import RocksDBBackend
from stores.snapshot import Manifest, ingest_partition

Correction = tuple[bytes, bytes | None]  # a key, and its value in the checkpoint (None: not there)


async def changed_keys(consumer: AIOKafkaConsumer, tp: TopicPartition, start: int) -> set[bytes]:
    """The keys of the changelog partition's records from `start` to its end now (read committed)."""
    end = (await consumer.end_offsets([tp]))[tp]
    if start >= end:
        return set()
    consumer.assign([tp])
    consumer.seek(tp, start)
    keys: set[bytes] = set()
    while await consumer.position(tp) < end:
        for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
            if record.offset < end and record.key is not None:
                keys.add(record.key)
    return keys


def checkpoint_values(directory: Path, manifest: Manifest, partition: int, keys: set[bytes]) -> list[Correction]:
    """Each key's value in the checkpoint's partition, or None; in key order."""
    with tempfile.TemporaryDirectory(prefix="rewind-") as scratch:
        store = RocksDBBackend(Path(scratch) / "store")
        try:
            ingest_partition(store, directory, manifest, partition)
            return [(key, store.get(key)) for key in sorted(keys)]
        finally:
            store.close()


async def corrections(
    consumer: AIOKafkaConsumer, directory: Path, manifest: Manifest
) -> dict[TopicPartition, list[Correction]]:
    """What each partition of the store's changelog needs to agree with the checkpoint."""
    assert manifest.changelog_topic is not None
    found: dict[TopicPartition, list[Correction]] = {}
    for partition in range(manifest.partitions):
        tp = TopicPartition(manifest.changelog_topic, partition)
        keys = await changed_keys(consumer, tp, manifest.offset(partition))
        if keys:
            found[tp] = checkpoint_values(directory, manifest, partition, keys)
    return found


async def ends(consumer: AIOKafkaConsumer, manifest: Manifest) -> dict[int, int]:
    """The end offset of each partition of the store's changelog now."""
    assert manifest.changelog_topic is not None
    tps = [TopicPartition(manifest.changelog_topic, partition) for partition in range(manifest.partitions)]
    return {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}


async def append(producer: AIOKafkaProducer, tp: TopicPartition, records: list[Correction]) -> None:
    """The corrections, to the partition, acknowledged."""
    sent = [await producer.send(tp.topic, value, key=key, partition=tp.partition) for key, value in records]
    for future in sent:
        await future
