"""The two schema formats: how a schema's text is compiled, and records written and read with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Protocol, TypeVar

import fastavro
import fastjsonschema
from fastavro.schema import to_parsing_canonical_form

from runtime.schema_registry.client import SchemaType
from stores.serdes import JsonSerde

T = TypeVar("T")


class SchemaFormat(Protocol[T]):
    schema_type: SchemaType

    def compile(self, text: str) -> T:
        """The schema ready for use; a ValueError says why the text is not one."""

    def record_name(self, schema: T) -> str | None:
        """The record's full name, for the subject naming strategies that use it."""

    def same(self, one: T, other: T) -> bool: ...

    def write(self, schema: T, obj: Any, header: bytes) -> bytes:
        """The record's bytes after `header` (the wire format's), in one buffer."""

    def read(self, writer: T, reader: T | None, data: bytes, start: int) -> Any:
        """The record from `data[start:]`; `reader` is the app's own schema when it differs from the
        writer's (Avro resolves between them)."""


class AvroFormat:
    schema_type: SchemaType = "AVRO"

    def compile(self, text: str) -> Any:
        try:
            return fastavro.parse_schema(json.loads(text))
        except Exception as error:  # fastavro raises several kinds for a schema it cannot take
            raise ValueError(f"not an Avro schema: {type(error).__name__}: {error}") from None

    def record_name(self, schema: Any) -> str | None:
        return schema.get("name") if isinstance(schema, dict) else None

    def same(self, one: Any, other: Any) -> bool:
        return bool(to_parsing_canonical_form(one) == to_parsing_canonical_form(other))

    def write(self, schema: Any, obj: Any, header: bytes) -> bytes:
        buffer = BytesIO(header)
        buffer.seek(len(header))
        fastavro.schemaless_writer(buffer, schema, obj)
        return buffer.getvalue()

    def read(self, writer: Any, reader: Any | None, data: bytes, start: int) -> Any:
        buffer = BytesIO(data)  # shares the bytes: nothing is copied
        buffer.seek(start)
        return fastavro.schemaless_reader(buffer, writer, reader)


@dataclass(frozen=True)
class JsonSchema:
    document: dict[str, Any]
    validate: Any  # fastjsonschema's compiled validator: raises a ValueError for a value that does not match


def _no_remote_references(uri: str) -> Any:
    raise ValueError(f"the schema refers to {uri}: schemas that reference others are not supported")


class JsonSchemaFormat:
    """Values are UTF-8 JSON (as the `json` serde writes them), checked against the schema both ways."""

    schema_type: SchemaType = "JSON"
    _json = JsonSerde()

    def compile(self, text: str) -> JsonSchema:
        try:
            document = json.loads(text)
            validate = fastjsonschema.compile(
                document, handlers={"http": _no_remote_references, "https": _no_remote_references}
            )
        except (ValueError, fastjsonschema.JsonSchemaDefinitionException) as error:
            raise ValueError(f"not a JSON Schema: {error}") from None
        if not isinstance(document, dict):
            raise ValueError("not a JSON Schema: a schema is a JSON object")
        return JsonSchema(document, validate)

    def record_name(self, schema: JsonSchema) -> str | None:
        title = schema.document.get("title")
        return title if isinstance(title, str) else None

    def same(self, one: JsonSchema, other: JsonSchema) -> bool:
        return one.document == other.document

    def write(self, schema: JsonSchema, obj: Any, header: bytes) -> bytes:
        schema.validate(obj)
        return header + self._json.serialize(obj)

    def read(self, writer: JsonSchema, reader: JsonSchema | None, data: bytes, start: int) -> Any:
        value = self._json.deserialize(data[start:])
        (reader or writer).validate(value)
        return value


FORMATS: dict[str, SchemaFormat[Any]] = {"avro": AvroFormat(), "json_schema": JsonSchemaFormat()}
