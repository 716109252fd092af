"""A topic's Avro or JSON Schema serde: records in the Confluent wire format, schemas in the registry.

It writes with one schema: the topic's schema file (registered under the topic's subject on first use,
or looked up there), else the subject's latest. It reads each record with the schema its id names,
fetched once and kept, into the topic's schema file when there is one (Avro resolves the two, so a
field added with a default reads as its default from older records, and is left out of newer records
by an older reader). A record whose schema id the registry does not have, or whose bytes do not fit
its schema, fails to deserialize and goes to the deserialization policy; a registry that cannot be
reached stops the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from processors.serdes import Serde
from runtime.schema_formats import FORMATS, SchemaFormat
from runtime.schema_registry.client import RegisteredSchema, RegistryClient
from runtime.schema_registry.wire_format import HEADER_SIZE, header, schema_id_of

T = TypeVar("T")
R = TypeVar("R")
Part = Literal["key", "value"]


@dataclass(frozen=True)
class Subject:
    """How the subject of a topic's key or value schemas is named."""

    topic: str
    part: Part
    strategy: str

    def name(self, record_name: str | None) -> str:
        if self.strategy == "topic_name":
            return f"{self.topic}-{self.part}"
        if record_name is None:
            raise ValueError(f"the {self.strategy} subject naming strategy needs a schema with a record name")
        return record_name if self.strategy == "record_name" else f"{self.topic}-{record_name}"


class RegistrySerde(Generic[T, R]):
    def __init__(
        self,
        schema_format: SchemaFormat[T, R],
        registry: RegistryClient,
        subject: Subject,
        own_schema: str | None,
        auto_register: bool,
    ):
        self._format = schema_format
        self._registry = registry
        self._subject = subject
        self._own_text = own_schema
        self._own = None if own_schema is None else schema_format.compile(own_schema)
        self._auto_register = auto_register
        self._writer: tuple[bytes, T] | None = None
        self._readers: dict[int, R] = {}

    def serialize(self, obj: Any) -> bytes:
        writer = self._writer or self._writer_schema()
        return self._format.write(writer[1], obj, writer[0])

    def deserialize(self, data: bytes) -> Any:
        schema_id = schema_id_of(data)
        reader = self._readers.get(schema_id) or self._reader(schema_id)
        return self._format.read(reader, data, HEADER_SIZE)

    def _writer_schema(self) -> tuple[bytes, T]:
        registered = self._registered_writer()
        compiled = self._own if self._own is not None else self._format.compile(registered.text)
        self._writer = (header(registered.schema_id), compiled)
        return self._writer

    def _registered_writer(self) -> RegisteredSchema:
        if self._own is None or self._own_text is None:
            return self._registry.latest(self._subject.name(None))
        subject = self._subject.name(self._format.record_name(self._own))
        schema_type = self._format.schema_type
        if self._auto_register:
            return self._registry.register(subject, schema_type, self._own_text)
        return self._registry.look_up(subject, schema_type, self._own_text)

    def _reader(self, schema_id: int) -> R:
        """What reads the records written with the schema `schema_id`, into the app's own schema."""
        registered = self._registry.schema(schema_id)
        if registered.schema_type != self._format.schema_type:
            raise ValueError(
                f"schema id {schema_id} is a {registered.schema_type} schema, not {self._format.schema_type}"
            )
        reader = self._format.reader(self._format.compile(registered.text), self._own)
        self._readers[schema_id] = reader
        return reader


def registry_serde(name: str, registry: RegistryClient, topic: str, part: Part, schema: Path | None) -> Serde:
    """The serde `name` (avro, json_schema) of a topic's keys or values; `schema` is its schema file."""
    config = registry.config
    subject = Subject(topic, part, config.subject_name_strategy)
    own = None if schema is None else schema.read_text()
    return RegistrySerde(FORMATS[name], registry, subject, own, config.auto_register)
