"""What a serde is: turns keys and values into bytes and back (a user class named in the YAML implements it)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Serde(Protocol):
    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...
