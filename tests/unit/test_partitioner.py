"""stores.partitioner picks the partition a Java producer (and aiokafka's default partitioner) would."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from stores.partitioner import POSITIVE, murmur2, partition_for

# aiokafka's tests/test_partitioner.py (test_murmur2_java_compatibility): partitions of 1000,
# as computed by Kafka's Java partitioner.
AT_1000_PARTITIONS = [
    (b"", 681),
    (b"a", 524),
    (b"ab", 434),
    (b"abc", 107),
    (b"123456789", 566),
    (b"\x00 ", 742),
]

# Kafka's clients UtilsTest.testMurmur2: Utils.murmur2 as a signed Java int.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# librdkafka's unittest_murmur2 (src/rdmurmur2.c): the Java client's murmur2 as unsigned 32 bits. The
# suffixes of "1234" and of the long key cover every tail length, and "" the empty key.
LIBRDKAFKA_MURMUR2 = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424F1C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4A62B377),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xE0E4E09E),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62B8B43F),
    (b"", 0x106E08D9),
]


def java_murmur2(data: bytes) -> int:
    """A line-by-line port of Kafka's Utils.murmur2 (signed 32-bit result), as a reference."""

    def int32(value: int) -> int:
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value & 0x80000000 else value

    def unsigned_shift(value: int, bits: int) -> int:  # Java's >>>
        return (value & 0xFFFFFFFF) >> bits

    length = len(data)
    m, r = 0x5BD1E995, 24
    h = int32(0x9747B28C ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = data[i4] + (data[i4 + 1] << 8) + (data[i4 + 2] << 16) + (data[i4 + 3] << 24)
        k = int32(k * m)
        k = int32(k ^ unsigned_shift(k, r))
        k = int32(k * m)
        h = int32(h * m)
        h = int32(h ^ k)
    tail = length % 4
    base = length & ~3
    if tail >= 3:
        h = int32(h ^ (data[base + 2] << 16))
    if tail >= 2:
        h = int32(h ^ (data[base + 1] << 8))
    if tail >= 1:
        h = int32(h ^ data[base])
        h = int32(h * m)
    h = int32(h ^ unsigned_shift(h, 13))
    h = int32(h * m)
    return int32(h ^ unsigned_shift(h, 15))


def java_partition(key: bytes, partitions: int) -> int:
    """BuiltInPartitioner.partitionForKey: toPositive(murmur2(key)) % numPartitions."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(("key", "expected"), AT_1000_PARTITIONS)
def test_known_partitions_at_1000(key: bytes, expected: int) -> None:
    assert partition_for(key, 1000) == expected


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2)
def test_kafka_murmur2_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected & 0xFFFFFFFF
    assert murmur2(key) & POSITIVE == expected & 0x7FFFFFFF  # Utils.toPositive


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA_MURMUR2)
def test_librdkafka_murmur2_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert murmur2(key) & POSITIVE == expected & 0x7FFFFFFF
    assert partition_for(key, 12) == (expected & 0x7FFFFFFF) % 12


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2)
@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 12, 100, 1000, 2**31 - 1])
def test_partition_of_kafka_vectors(key: bytes, expected: int, partitions: int) -> None:
    assert partition_for(key, partitions) == (expected & 0x7FFFFFFF) % partitions


def test_reference_port_agrees_with_the_vectors() -> None:
    for key, expected in JAVA_MURMUR2:
        assert java_murmur2(key) == expected
    for key, partition in AT_1000_PARTITIONS:
        assert java_partition(key, 1000) == partition
    for key, unsigned in LIBRDKAFKA_MURMUR2:
        assert java_murmur2(key) & 0xFFFFFFFF == unsigned


def test_same_as_aiokafkas_default_partitioner() -> None:
    from aiokafka.partitioner import DefaultPartitioner

    keys = [f"key-{n}".encode() for n in range(500)] + [bytes(range(n)) for n in range(12)]
    for partitions in (1, 3, 6, 64):
        everything = list(range(partitions))
        for key in keys:
            assert partition_for(key, partitions) == DefaultPartitioner()(key, everything, everything)


def test_every_tail_length_and_high_bytes() -> None:
    """Tails of 0-3 bytes and bytes >= 0x80 (signed in Java) are where ports usually go wrong."""
    for length in range(17):
        for fill in (0x00, 0x7F, 0x80, 0xFF):
            key = bytes([fill]) * length
            assert murmur2(key) == java_murmur2(key) & 0xFFFFFFFF, (length, fill)


@given(key=st.binary(max_size=300), partitions=st.integers(min_value=1, max_value=100_000))
def test_in_range_and_same_as_java(key: bytes, partitions: int) -> None:
    partition = partition_for(key, partitions)
    assert 0 <= partition < partitions
    assert partition == java_partition(key, partitions)


@given(key=st.binary(max_size=64))
def test_murmur2_is_an_unsigned_32_bit_int(key: bytes) -> None:
    assert 0 <= murmur2(key) <= 0xFFFFFFFF


@given(key=st.binary(max_size=300), partitions=st.integers(min_value=1, max_value=2**31 - 1))
def test_same_as_aiokafkas_pure_python_murmur2(key: bytes, partitions: int) -> None:
    """The compiled hash against aiokafka's port of Utils.murmur2, on any bytes (empty, >= 0x80, every tail)."""
    expected: int = aiokafka_murmur2(key)
    assert murmur2(key) == expected
    assert murmur2(key) & POSITIVE == expected & 0x7FFFFFFF
    assert partition_for(key, partitions) == (expected & 0x7FFFFFFF) % partitions


def test_only_bytes_keys() -> None:
    """Record keys are bytes; anything else is refused rather than hashed some other way."""
    for key in ("abc", bytearray(b"abc"), memoryview(b"abc")):
        with pytest.raises(TypeError):
            partition_for(key, 3)  # type: ignore[arg-type]
