"""Kafka's default partitioner, so a record lands where a Java producer would put it.

The hash is compiled (`murmurhash2`), so every key costs the same: no cache whose misses grow with the
number of distinct keys.
"""

from __future__ import annotations

from murmurhash2 import murmurhash2

KAFKA_SEED = 0x9747B28C  # Kafka's Utils.murmur2 seed
POSITIVE = 0x7FFFFFFF  # Utils.toPositive: the sign bit cleared
__all__ = ["KAFKA_SEED", "POSITIVE", "murmur2", "murmurhash2", "partition_for"]


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (MurmurHash2, 32 bit, Kafka's seed) as an unsigned int: Java's signed
    result is the same 32 bits. (A loop over many records calls `murmurhash2(key, KAFKA_SEED)` itself,
    which costs no Python frame.)"""
    return murmurhash2(data, KAFKA_SEED)


def partition_for(key: bytes, partitions: int) -> int:
    """`toPositive(murmur2(key)) % partitions`, as in Kafka's BuiltInPartitioner."""
    return (murmurhash2(key, KAFKA_SEED) & POSITIVE) % partitions
