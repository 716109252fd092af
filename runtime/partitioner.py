"""Kafka's default partitioner, so a record lands where a Java producer would put it."""

from __future__ import annotations

from functools import lru_cache

from aiokafka.partitioner import murmur2


@lru_cache(maxsize=65536)
def _positive_hash(key: bytes) -> int:
    return int(murmur2(key)) & 0x7FFFFFFF


def partition_for(key: bytes, partitions: int) -> int:
    """`toPositive(murmur2(key)) % partitions`, as in Kafka's BuiltInPartitioner."""
    return _positive_hash(key) % partitions
