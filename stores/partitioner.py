"""Kafka's default partitioner, so a record lands where a Java producer would put it."""

from __future__ import annotations

import struct
from functools import lru_cache

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_words = struct.Struct("<I").iter_unpack


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (MurmurHash2, 32 bit, Kafka's seed) as an unsigned int."""
    length = len(data)
    h = _SEED ^ length
    body = length & ~3
    for (word,) in _words(data[:body]):
        k = (word * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[body + 2] << 16
        if tail >= 2:
            h ^= data[body + 1] << 8
        h = ((h ^ data[body]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


@lru_cache(maxsize=262_144)
def positive_hash(key: bytes) -> int:
    """`toPositive(murmur2(key))`, kept for the keys seen last: a C call, for the output path's every record."""
    return murmur2(key) & 0x7FFFFFFF


def partition_for(key: bytes, partitions: int) -> int:
    """`toPositive(murmur2(key)) % partitions`, as in Kafka's BuiltInPartitioner."""
    return positive_hash(key) % partitions
