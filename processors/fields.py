"""A field of a record's value named by a dotted path (`order.id` reads `value["order"]["id"]`), as the
built-in processors that take one from the YAML (de-duplication's id, a sink's column) read it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from processors.record import Record


def value_field(path: str, missing: Callable[[str], Exception]) -> Callable[[Record], Any]:
    """Reads `path` from a record's value; raises `missing(path)` when a step of it is not there."""
    fields = path.split(".")

    def read(record: Record) -> Any:
        found: Any = record.value
        for name in fields:
            if not isinstance(found, Mapping) or name not in found:
                raise missing(path)
            found = found[name]
        return found

    return read
