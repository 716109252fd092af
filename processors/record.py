"""The record a processor receives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Headers = Sequence[tuple[str, bytes]]


@dataclass(slots=True)
class Record:
    """One input record, with key and value already decoded by the topic's serdes.

    Treat it as read-only. (It is not a frozen dataclass because those cost 4x more to build,
    and one is built per record.)
    """

    topic: str
    partition: int
    offset: int
    timestamp: int  # event time, epoch ms: Kafka's, unless the topic's `timestamp` setting says where else
    key: Any
    value: Any
    headers: Headers = ()

    @property
    def idempotency_key(self) -> str:
        """`topic:partition:offset`: the same for every delivery of this record, and for no other record.
        A processor that writes elsewhere stores it with what it writes, in the same transaction, and
        skips a record whose key is there already (docs/databases.md)."""
        return f"{self.topic}:{self.partition}:{self.offset}"

    def header(self, name: str) -> bytes | None:
        """The last value of header `name`, or None."""
        for header_name, value in reversed(self.headers):
            if header_name == name:
                return value
        return None
