"""Kafka's default partitioner, so a record lands where a Java producer would put it.

The hash is compiled (`murmurhash2`), so every key costs the same: no cache whose misses grow with the
number of distinct keys.
"""

from __future__ import annotations

from murmurhash2 import murmurhash2

_SEED = 0x9747B28C  # Kafka's Utils.murmur2 seed


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (MurmurHash2, 32 bit, Kafka's seed) as an unsigned int: Java's signed
    result is the same 32 bits."""
    return murmurhash2(data, _SEED)


def positive_hash(key: bytes) -> int:
    """`toPositive(murmur2(key))`, i.e. `murmur2(key) & 0x7fffffff`: for callers that take the modulo
    themselves, once per record."""
    return murmurhash2(key, _SEED) & 0x7FFFFFFF


def partition_for(key: bytes, partitions: int) -> int:
    """`toPositive(murmur2(key)) % partitions`, as in Kafka's BuiltInPartitioner."""
    return (murmurhash2(key, _SEED) & 0x7FFFFFFF) % partitions
