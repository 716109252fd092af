"""`replay --partitioner` places a key as librdkafka's partitioners do, checked against librdkafka's own test
vectors: its partitioner test (tests/0048-partitioner.c) and its FNV-1a unit test (src/rdfnv1a.c)."""

from __future__ import annotations

import pytest

from runtime.replay.partitioners import PARTITIONERS, KeyPlacedAtRandom, elsewhere, sarama_fnv1a
from runtime.replay.scan import Replay

# tests/0048-partitioner.c: each key's hash under consistent (CRC32), murmur2 and fnv1a; the partition is
# the hash modulo the partition count (7, or 17 in its long run).
KEYS = [b"23456", b"this is another string with more length to it perhaps", b"hejsan"]
HASHES = {
    "consistent": [0xB1B451D7, 0xB0150DF7, 0xD077037E],
    "murmur2": [0x058D780F, 0x4F7703DA, 0x5EC19395],
    "fnv1a": [0x27E6F469, 0x155E3E5F, 0x17B1E27A],
}
# src/rdfnv1a.c (unittest_fnv1a): Sarama's FNV-1a, from Go's hash/fnv made non-negative. "1234", "34",
# "reAmble..." and "Amble..." hash negative as signed ints, and are negated.
SARAMA_FNV1A = [
    (b"kafka", 0x0D33C4E1),
    (b"giberish123456789", 0x77A58295),
    (b"1234", 0x023BDD03),
    (b"234", 0x2DEA3CD2),
    (b"34", 0x740FA83E),
    (b"4", 0x310CA263),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x65CBD69C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x6E49C79A),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0x69EED356),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x6ABCC023),
    (b"", 0x7EE3623B),
]


@pytest.mark.parametrize("partitions", [7, 17])
@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("consistent", "consistent"),
        ("consistent_random", "consistent"),
        ("murmur2", "murmur2"),
        ("murmur2_random", "murmur2"),
        ("fnv1a", "fnv1a"),
        ("fnv1a_random", "fnv1a"),
    ],
)
def test_each_partitioner_puts_a_key_where_librdkafka_does(name: str, family: str, partitions: int) -> None:
    placed = [PARTITIONERS[name].partition(key, partitions) for key in KEYS]
    assert placed == [hashed % partitions for hashed in HASHES[family]]


@pytest.mark.parametrize(("key", "hashed"), SARAMA_FNV1A)
def test_fnv1a_is_saramas(key: bytes, hashed: int) -> None:
    assert sarama_fnv1a(key) == hashed


def test_an_empty_key_has_one_partition_but_under_consistent_random() -> None:
    # 0048-partitioner.c: "" goes to CRC32 0 under consistent, murmur2 0x106e08d9 and FNV-1a 0x7ee3623b.
    assert PARTITIONERS["consistent"].partition(b"", 17) == 0
    assert PARTITIONERS["murmur2_random"].partition(b"", 17) == 0x106E08D9 % 17
    assert PARTITIONERS["fnv1a_random"].partition(b"", 17) == 0x7EE3623B % 17
    with pytest.raises(KeyPlacedAtRandom, match="replay each partition with --partition"):
        Replay("t", b"", partitioner="consistent_random").partition_of(17)


def test_the_others_are_named_by_the_partition_they_read() -> None:
    key = b"hejsan"
    assert elsewhere(key, 17, "murmur2_random") == {
        0xD077037E % 17: ["consistent_random", "consistent"],
        0x17B1E27A % 17: ["fnv1a_random", "fnv1a"],
    }
    assert elsewhere(key, 1, "murmur2_random") == {}  # one partition: every partitioner reads it
