"""The Confluent wire format: a zero byte, the schema's id in four bytes (big-endian), then the payload."""

from __future__ import annotations

MAGIC = 0
HEADER_SIZE = 5


def header(schema_id: int) -> bytes:
    return bytes((MAGIC,)) + schema_id.to_bytes(4, "big")


def schema_id_of(data: bytes) -> int:
    """The id a record's bytes name; a ValueError when they are not in the wire format."""
    if len(data) < HEADER_SIZE or data[0] != MAGIC:
        first = f"starts with byte {data[0]}" if data else "is empty"
        raise ValueError(
            f"not in the schema registry's wire format: {len(data)} bytes, {first} (expected 0 and a schema id)"
        )
    return int.from_bytes(data[1:HEADER_SIZE], "big")
