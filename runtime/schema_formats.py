"""The two schema formats: how a schema's text is compiled, and records written and read with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import cavro
import fastjsonschema

from stores.serdes import JsonSerde

SchemaType = Literal["AVRO", "JSON"]
T = TypeVar("T")
R = TypeVar("R")


class SchemaFormat(Protocol[T, R]):
    """A format compiles schemas (`T`) and, from a writer's schema and the app's own, a reader (`R`)."""

    schema_type: SchemaType

    def compile(self, text: str) -> T:
        """The schema ready for use; a ValueError says why the text is not one."""

    def record_name(self, schema: T) -> str | None:
        """The record's full name, for the subject naming strategies that use it."""

    def reader(self, writer: T, own: T | None) -> R:
        """What reads records written with `writer` into the app's own schema (Avro resolves the two;
        without one of its own, the app reads each record as written)."""

    def write(self, schema: T, obj: Any, header: bytes) -> bytes:
        """The record's bytes after `header` (the wire format's), in one buffer."""

    def read(self, reader: R, data: bytes, start: int) -> Any:
        """The record from `data[start:]`."""


# Records read as dicts, as the other serdes give them; cavro's record classes are its default.
AVRO_OPTIONS = cavro.DEFAULT_OPTIONS.replace(record_decodes_to_dict=True)


class AvroFormat:
    """Through cavro: compiled per schema, it reads and writes a record in about two thirds of
    fastavro's time (bench/README.md, `registry_serdes.py`)."""

    schema_type: SchemaType = "AVRO"

    def compile(self, text: str) -> cavro.Schema:
        try:
            return cavro.Schema(text, options=AVRO_OPTIONS)
        except Exception as error:  # cavro raises several kinds for a schema it cannot take
            raise ValueError(f"not an Avro schema: {type(error).__name__}: {error}") from None

    def record_name(self, schema: cavro.Schema) -> str | None:
        named = schema.type
        if not isinstance(named, cavro.RecordType | cavro.EnumType | cavro.FixedType):
            return None
        namespace = named.effective_namespace
        return f"{namespace}.{named.name}" if namespace else str(named.name)

    def reader(self, writer: cavro.Schema, own: cavro.Schema | None) -> Any:
        return writer if own is None else own.reader_for_writer(writer)

    def write(self, schema: cavro.Schema, obj: Any, header: bytes) -> bytes:
        encoded: bytes = schema.binary_encode(obj)
        return header + encoded

    def read(self, reader: Any, data: bytes, start: int) -> Any:
        return reader.binary_decode(data[start:])


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

    def reader(self, writer: JsonSchema, own: JsonSchema | None) -> JsonSchema:
        return writer if own is None else own

    def write(self, schema: JsonSchema, obj: Any, header: bytes) -> bytes:
        schema.validate(obj)
        return header + self._json.serialize(obj)

    def read(self, reader: JsonSchema, data: bytes, start: int) -> Any:
        value = self._json.deserialize(data[start:])
        reader.validate(value)
        return value


FORMATS: dict[str, SchemaFormat[Any, Any]] = {"avro": AvroFormat(), "json_schema": JsonSchemaFormat()}
