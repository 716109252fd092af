"""How the raw records of a global store's topic become changes of the store: decoded, updated, encoded.

Kept apart from the store so that bootstrap readers in other processes (runtime/global_stores/readers.py)
turn records into changes exactly as the worker does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from processors.global_updater import GlobalStoreUpdater
from processors.record import Record
from processors.serdes import Serde
from stores.serdes import import_object, resolve_serde

if TYPE_CHECKING:
    from stores import Change

Failed = tuple[Any, BaseException]
"""A raw record that could not be applied, and why."""


class ChangeMaker:
    """A store's serdes and updater, applied to aiokafka consumer records."""

    def __init__(self, keys: Serde, values: Serde, updater: GlobalStoreUpdater):
        self.keys = keys
        self.values = values
        self._updater = updater
        self._mirrors = type(updater).changes is GlobalStoreUpdater.changes

    @classmethod
    def configured(cls, key_serde: str, value_serde: str, updater: str | None) -> ChangeMaker:
        """From a global store's settings: serdes by name, the updater class by import path (None: mirror)."""
        updater_class: type[GlobalStoreUpdater] = GlobalStoreUpdater if updater is None else import_object(updater)
        return cls(resolve_serde(key_serde), resolve_serde(value_serde), updater_class())

    def changes(self, topic: str, partition: int, records: Iterable[Any]) -> tuple[list[Change], list[Failed]]:
        """The changes of `records` of one partition, in order, and the records that failed: nothing of
        those is in the changes. A record needs `offset`, `timestamp`, `key`, `value` and `headers`."""
        return self._mirrored(records) if self._mirrors else self._updated(topic, partition, records)

    def _mirrored(self, records: Iterable[Any]) -> tuple[list[Change], list[Failed]]:
        """The default update without a round trip through objects: the value bytes are kept as sent,
        once they are known to decode; the key is encoded again, as `get` encodes it."""
        changes: list[Change] = []
        failed: list[Failed] = []
        append = changes.append
        encode_key, decode_key, decode_value = self.keys.serialize, self.keys.deserialize, self.values.deserialize
        for raw in records:
            try:
                key_bytes, value_bytes = raw.key, raw.value
                if key_bytes is None:
                    raise ValueError("a record without a key cannot be stored")
                if value_bytes is not None:
                    decode_value(value_bytes)
                append((encode_key(decode_key(key_bytes)), value_bytes))
            except Exception as error:  # bad data: recorded, the store goes on
                failed.append((raw, error))
        return changes, failed

    def _updated(self, topic: str, partition: int, records: Iterable[Any]) -> tuple[list[Change], list[Failed]]:
        """Each record through the updater. A value it hands back as it came (the record's own value
        object) is stored as the bytes it came in, as the mirror stores it, without encoding it again."""
        changes: list[Change] = []
        failed: list[Failed] = []
        append, updater_changes = changes.append, self._updater.changes
        encode_key, encode_value = self.keys.serialize, self.values.serialize
        decode_key, decode_value = self.keys.deserialize, self.values.deserialize
        for raw in records:
            done = len(changes)
            try:
                key_bytes, value_bytes = raw.key, raw.value
                value = None if value_bytes is None else decode_value(value_bytes)
                record = Record(
                    topic,
                    partition,
                    raw.offset,
                    raw.timestamp,
                    None if key_bytes is None else decode_key(key_bytes),
                    value,
                    raw.headers,
                )
                for key, new in updater_changes(record):
                    append(
                        (encode_key(key), None if new is None else value_bytes if new is value else encode_value(new))
                    )
            except Exception as error:  # bad data or a failing updater: recorded, the store goes on
                del changes[done:]  # nothing of a failed record is applied
                failed.append((raw, error))
        return changes, failed
