"""A record as a row of the sink's table: each column's value taken from the record, and checked against
the column's type, so that a record whose value the column cannot take fails alone, in `process`, under
the error policy, rather than failing a whole batch in the database."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Callable
from typing import Any

from processors.fields import value_field
from processors.record import Record

SOURCES = ("key", "value", "topic", "partition", "offset", "timestamp")
"""What a column can take: the record's key, its value (whole, or a field: `value.amount`, `value.a.b`),
its topic, partition, offset or timestamp."""

_INTEGERS = {"smallint", "integer", "bigint"}
_NUMBERS = {"real", "double precision", "numeric"}
_TEXTS = {"text", "character varying", "character"}
_TIMES = {"timestamp with time zone", "timestamp without time zone"}


class RowError(ValueError):
    """A record that makes no row of the table: a field it lacks, or a value its column cannot take."""


def source_of(spec: str) -> Callable[[Record], Any]:
    """How a column's `spec` (see `SOURCES`) reads its value from a record."""
    head, _, path = spec.partition(".")
    if head not in SOURCES or (path and head != "value"):
        raise ValueError(f"'{spec}' is none of {', '.join(SOURCES)} or value.<field>")
    if head != "value" or not path:
        return lambda record: getattr(record, head)
    return value_field(path, lambda missing: RowError(f"the record's value has no field '{missing}'"))


def converter(column: str, data_type: str) -> Callable[[Any], Any]:
    """The value a column of `data_type` (as information_schema names it) is given for `found`; RowError
    when it cannot take it. Types not listed here are handed to the database as they are."""

    def refuse(found: Any, wanted: str) -> RowError:
        return RowError(f"column '{column}' ({data_type}) takes {wanted}, not {type(found).__name__} {found!r:.60}")

    def convert(found: Any) -> Any:
        if found is None:
            return None
        if data_type in _INTEGERS:
            if isinstance(found, int) and not isinstance(found, bool):
                return found
            raise refuse(found, "an integer")
        if data_type in _NUMBERS:
            if isinstance(found, int | float | decimal.Decimal) and not isinstance(found, bool):
                return decimal.Decimal(str(found)) if data_type == "numeric" else float(found)
            raise refuse(found, "a number")
        if data_type in _TEXTS:
            if isinstance(found, str):
                return found
            raise refuse(found, "a string")
        if data_type == "boolean":
            if isinstance(found, bool):
                return found
            raise refuse(found, "true or false")
        if data_type in ("json", "jsonb"):
            return json.dumps(found, separators=(",", ":"))
        if data_type in _TIMES:
            if isinstance(found, datetime.datetime):
                return found
            if isinstance(found, int) and not isinstance(found, bool):  # epoch milliseconds
                moment = datetime.datetime.fromtimestamp(found / 1000, datetime.UTC)
                return moment if data_type == "timestamp with time zone" else moment.replace(tzinfo=None)
            raise refuse(found, "a datetime or epoch milliseconds")
        if data_type == "bytea":
            if isinstance(found, bytes):
                return found
            raise refuse(found, "bytes")
        if data_type == "uuid":
            try:
                return found if isinstance(found, uuid.UUID) else uuid.UUID(str(found))
            except ValueError:
                raise refuse(found, "a UUID") from None
        return found

    return convert
