"""Raw records of a global store's topic turned into the store's changes, by the mirror and by an updater."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka import ConsumerRecord

from processors import GlobalStoreUpdater, Record
from runtime.global_stores.changes import ChangeMaker

UPDATER = "tests.unit.test_global_changes:Reshape"


def raw(offset: int, key: bytes | None, value: bytes | None) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord("table", 0, offset, 1_000 + offset, 0, key, value, None, -1, -1, ())


class Reshape(GlobalStoreUpdater):
    """Keeps rows as they came, by id; a row with `alias` also writes it, then fails unless it has an id."""

    def changes(self, record: Record) -> Iterable[tuple[Any, Any]]:
        row = record.value
        if row is None or "keep" in row:
            return ((record.key, row),)
        return ((row["alias"], {"of": record.key}), (row["id"], row))


def test_the_mirror_keeps_value_bytes_as_sent_and_encodes_keys_as_get_does() -> None:
    maker = ChangeMaker.configured("json", "json", None)
    changes, failed = maker.changes("table", 0, [raw(0, b'{"k": 1}', b'{"a":  1}'), raw(1, b'"t"', None)])
    assert changes == [(b'{"k":1}', b'{"a":  1}'), (b'"t"', None)]
    assert failed == []


def test_the_mirror_leaves_out_what_does_not_decode_and_keyless_records() -> None:
    maker = ChangeMaker.configured("str", "json", None)
    bad_json, keyless = raw(1, b"b", b"{nope"), raw(2, None, b"{}")
    changes, failed = maker.changes("table", 0, [raw(0, b"a", b"1"), bad_json, keyless, raw(3, b"c", b"3")])
    assert changes == [(b"a", b"1"), (b"c", b"3")]
    assert [record for record, _ in failed] == [bad_json, keyless]
    assert all(isinstance(error, ValueError) for _, error in failed)


def test_a_value_the_updater_hands_back_as_it_came_keeps_its_bytes() -> None:
    maker = ChangeMaker.configured("str", "json", UPDATER)
    changes, failed = maker.changes("table", 0, [raw(0, b"a", b'{"keep": true,  "id": 1}'), raw(1, b"b", None)])
    assert changes == [(b"a", b'{"keep": true,  "id": 1}'), (b"b", None)]
    assert failed == []


def test_new_values_are_encoded_and_a_failed_record_applies_nothing() -> None:
    maker = ChangeMaker.configured("str", "json", UPDATER)
    no_id = raw(1, b"b", b'{"alias": "B"}')
    changes, failed = maker.changes(
        "table", 0, [raw(0, b"a", b'{"alias": "A", "id": 7}'), no_id, raw(2, b"c", b'{"keep": 1}')]
    )
    assert changes == [(b"A", b'{"of":"a"}'), (b"7", b'{"alias": "A", "id": 7}'), (b"c", b'{"keep": 1}')]
    assert [(record, repr(error)) for record, error in failed] == [(no_id, "KeyError('id')")]
