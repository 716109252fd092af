"""Ordered key ranges over bytes: prefix bounds, and unflushed changes laid over stored data."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from stores.backend import Change


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key that starts with `prefix`; `None` when there is none."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def overlay(stored: Iterator[tuple[bytes, bytes]], changes: Sequence[Change]) -> Iterator[tuple[bytes, bytes]]:
    """Merge sorted `changes` into sorted `stored` pairs: a change wins over its key, `None` hides it."""
    position, count = 0, len(changes)
    for key, value in stored:
        while position < count and changes[position][0] < key:
            changed_key, changed_value = changes[position]
            position += 1
            if changed_value is not None:
                yield changed_key, changed_value
        if position < count and changes[position][0] == key:
            value_or_none = changes[position][1]
            position += 1
            if value_or_none is not None:
                yield key, value_or_none
        else:
            yield key, value
    for changed_key, changed_value in changes[position:]:
        if changed_value is not None:
            yield changed_key, changed_value
