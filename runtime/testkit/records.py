"""What a test reads back from a topic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TopicRecord:
    """A record as a consumer of the topic sees it, key and value decoded with the topic's serdes."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes]]

    def header(self, name: str) -> bytes | None:
        """The last value of header `name`, None when the record has none."""
        found = [value for header, value in self.headers if header == name]
        return found[-1] if found else None


@dataclass(frozen=True)
class DeadLetter:
    """A record the error policy set aside: the input's bytes as they came, and what went wrong."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: dict[str, bytes]

    @classmethod
    def of(cls, record: Any) -> DeadLetter:
        return cls(record.key, record.value, record.timestamp, dict(record.headers))

    def _text(self, name: str) -> str:
        return self.headers[name].decode()

    @property
    def stage(self) -> str:
        """`deserialization`, `processing` or `global-store update`."""
        return self._text("error.stage")

    @property
    def error_type(self) -> str:
        return self._text("error.type")

    @property
    def message(self) -> str:
        return self._text("error.message")

    @property
    def processor(self) -> str:
        """The processor, or the global store, it failed in."""
        return self._text("error.processor")

    @property
    def source(self) -> tuple[str, int, int]:
        """The input record's topic, partition and offset."""
        return self._text("source.topic"), int(self._text("source.partition")), int(self._text("source.offset"))
