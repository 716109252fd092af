"""Where a producer put a key: the partitioners of librdkafka's `partitioner` setting, by its names.

A replay by key reads one partition, so it must pick the one the key's producer picked. Java's producer
(and aiokafka, and this runtime's outputs) hash the key with murmur2; librdkafka's clients (confluent-kafka,
the Go and .NET clients, kcat) default to `consistent_random`, a CRC32 of the key, and can be set to
murmur2 or to Sarama's FNV-1a. Each `_random` name differs from its plain one only for a record without a
key, which a replay by key never looks for; `consistent_random` also puts an empty key anywhere.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

from fnv_hash_fast import fnv1a_32

from stores.partitioner import partition_for

SIGN = 0x80000000
UINT32 = 0xFFFFFFFF


class KeyPlacedAtRandom(ValueError):
    """The partitioner puts this key in any partition: no one partition holds its records."""


def sarama_fnv1a(key: bytes) -> int:
    """FNV-1a (32 bit) made non-negative as a signed int, as Sarama's hash partitioner and librdkafka's
    `fnv1a` do: a negative hash is negated (the most negative one stays as it is)."""
    hashed: int = fnv1a_32(key)
    return (-hashed) & UINT32 if hashed & SIGN else hashed


def crc32_partition(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


def fnv1a_partition(key: bytes, partitions: int) -> int:
    return sarama_fnv1a(key) % partitions


@dataclass(frozen=True)
class Partitioner:
    """One of librdkafka's partitioners, for records with a key."""

    name: str
    summary: str
    place: Callable[[bytes, int], int]
    empty_key_at_random: bool = False

    def partition(self, key: bytes, partitions: int) -> int:
        if self.empty_key_at_random and not key:
            raise KeyPlacedAtRandom(
                f"partitioner {self.name} puts a record with an empty key in any partition: "
                "replay each partition with --partition"
            )
        return self.place(key, partitions)


DEFAULT = "murmur2_random"
PARTITIONERS = {
    partitioner.name: partitioner
    for partitioner in (
        Partitioner("murmur2_random", "murmur2 of the key: Java's producer, aiokafka, this runtime", partition_for),
        Partitioner("murmur2", "murmur2 of the key", partition_for),
        Partitioner("consistent_random", "CRC32 of the key: librdkafka's default", crc32_partition, True),
        Partitioner("consistent", "CRC32 of the key", crc32_partition),
        Partitioner("fnv1a_random", "FNV-1a of the key, as Sarama's hash partitioner", fnv1a_partition),
        Partitioner("fnv1a", "FNV-1a of the key, as Sarama's hash partitioner", fnv1a_partition),
    )
}


def elsewhere(key: bytes, partitions: int, used: str) -> dict[int, list[str]]:
    """The partitions other partitioners than `used` put `key` in, when not the one `used` does, and which."""
    read = PARTITIONERS[used].partition(key, partitions)
    found: dict[int, list[str]] = {}
    for partitioner in PARTITIONERS.values():
        if partitioner.empty_key_at_random and not key:
            continue
        partition = partitioner.partition(key, partitions)
        if partition != read:
            found.setdefault(partition, []).append(partitioner.name)
    return found
