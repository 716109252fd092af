"""The record a processor receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One input record, with key and value already decoded by the topic's serdes."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: Headers = ()

    def header(self, name: str) -> bytes | None:
        """The last value of header `name`, or None."""
        for header_name, value in reversed(self.headers):
            if header_name == name:
                return value
        return None
