"""The app YAML's checks of Avro and JSON Schema topics, and the wire format, without a registry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.config import ConfigError, parse_app
from runtime.schema_formats import FORMATS, AvroFormat
from runtime.schema_registry.serdes import Subject
from runtime.schema_registry.wire_format import header, schema_id_of
from stores.serdes import REGISTRY_SERDES

PAYMENT = {"type": "record", "name": "Payment", "namespace": "shop", "fields": [{"name": "id", "type": "string"}]}
CURRENCY = {"name": "currency", "type": "string", "default": "EUR"}


def app(topic: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "app_id": "shop",
        "topics": {"payments": topic},
        "processors": [{"name": "p", "class": "processors:Processor", "inputs": ["payments"]}],
        **extra,
    }


REGISTRY = {"url": "http://registry:8081"}


def test_an_avro_topic_with_its_schema_and_a_registry_is_valid(tmp_path: Path) -> None:
    schema = tmp_path / "payment.avsc"
    schema.write_text(json.dumps(PAYMENT))
    config = parse_app(app({"value_serde": "avro", "value_schema": str(schema)}, schema_registry=REGISTRY))
    assert config.topics["payments"].value_schema == schema
    assert config.schema_registry is not None and config.schema_registry.subject_name_strategy == "topic_name"


@pytest.mark.parametrize(
    ("topic", "extra", "message"),
    [
        ({"value_serde": "avro"}, {},
         "topics.payments.value_serde: 'avro' keeps its schemas in a schema registry: set schema_registry.url"),
        ({"value_serde": "json", "value_schema": "{schema}"}, {"schema_registry": REGISTRY},
         "topics.payments.value_schema: a schema file is for the serdes avro and json_schema, not 'json'"),
        ({"value_serde": "avro", "value_schema": "/nowhere.avsc"}, {"schema_registry": REGISTRY},
         "topics.payments.value_schema: cannot read /nowhere.avsc: No such file or directory"),
        ({"value_serde": "avro", "value_schema": "{not_avro}"}, {"schema_registry": REGISTRY},
         "topics.payments.value_schema: {not_avro} is not an Avro schema: UnknownType: Unknown type: recrd"),
        ({"value_serde": "json_schema", "value_schema": "{not_avro}"}, {"schema_registry": REGISTRY},
         "topics.payments.value_schema: {not_avro} is not a JSON Schema"),
        ({"value_serde": "avro"}, {"schema_registry": {**REGISTRY, "subject_name_strategy": "record_name"}},
         "topics.payments.value_schema: schema_registry.subject_name_strategy record_name names the subject"),
        ({}, {"schema_registry": {"url": "registry:8081"}}, "schema_registry.url: 'registry:8081' is not an http"),
        ({}, {"schema_registry": {"url": "http://me:secret@registry"}}, "holds credentials; give them as username"),
    ],
)  # fmt: skip
def test_mistakes_name_their_field(tmp_path: Path, topic: dict[str, Any], extra: dict[str, Any], message: str) -> None:
    (tmp_path / "p.avsc").write_text(json.dumps(PAYMENT))
    (tmp_path / "bad.avsc").write_text('{"type": "recrd", "name": "X"}')
    paths = {"schema": str(tmp_path / "p.avsc"), "not_avro": str(tmp_path / "bad.avsc")}
    topic = {field: value.format(**paths) if isinstance(value, str) else value for field, value in topic.items()}
    with pytest.raises(ConfigError) as raised:
        parse_app(app(topic, **extra))
    assert message.format(**paths) in str(raised.value)


def test_the_registry_serdes_named_are_those_with_a_schema_format() -> None:
    assert set(REGISTRY_SERDES) == set(FORMATS)


def test_an_app_without_registry_topics_starts_without_loading_the_schema_formats() -> None:
    """cavro brings numpy, and the database sources asyncpg: about 0.2 s of CPU at every start."""
    check = "import sys, runtime.cli; print(sorted({'cavro', 'numpy', 'asyncpg'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_a_store_takes_no_registry_serde() -> None:
    config = app({})
    config["processors"][0]["stores"] = {"totals": {"value_serde": "avro"}}
    with pytest.raises(
        ConfigError, match=r"processors\[0\]\.stores\.totals\.value_serde: serde 'avro' keeps its schemas"
    ):
        parse_app(config)


def test_subjects_are_named_by_the_strategy() -> None:
    assert Subject("payments", "value", "topic_name").name("shop.Payment") == "payments-value"
    assert Subject("payments", "key", "record_name").name("shop.Payment") == "shop.Payment"
    assert Subject("payments", "value", "topic_record_name").name("shop.Payment") == "payments-shop.Payment"


def test_the_wire_format_is_a_zero_byte_and_the_schema_id() -> None:
    assert header(258) == b"\x00\x00\x00\x01\x02"
    assert schema_id_of(header(258) + b"payload") == 258
    with pytest.raises(ValueError, match="not in the schema registry's wire format: 0 bytes, is empty"):
        schema_id_of(b"")


def test_avro_record_names_are_full_names() -> None:
    avro = AvroFormat()
    assert avro.record_name(avro.compile(json.dumps(PAYMENT))) == "shop.Payment"
    assert avro.record_name(avro.compile('{"type": "record", "name": "x.y.Payment", "fields": []}')) == "x.y.Payment"
    assert avro.record_name(avro.compile('{"type": "enum", "name": "Currency", "symbols": ["EUR"]}')) == "Currency"
    assert avro.record_name(avro.compile('"string"')) is None


def test_avro_reads_older_and_newer_records_into_the_apps_own_schema() -> None:
    avro = AvroFormat()
    old = avro.compile(json.dumps(PAYMENT))
    new = avro.compile(json.dumps({**PAYMENT, "fields": [*PAYMENT["fields"], CURRENCY]}))
    written_old = avro.write(old, {"id": "p1"}, b"head")
    written_new = avro.write(new, {"id": "p2", "currency": "USD"}, b"head")
    assert written_old.startswith(b"head")
    assert avro.read(avro.reader(old, new), written_old, 4) == {"id": "p1", "currency": "EUR"}
    assert avro.read(avro.reader(new, old), written_new, 4) == {"id": "p2"}
    assert avro.read(avro.reader(new, None), written_new, 4) == {"id": "p2", "currency": "USD"}


def test_an_avro_value_that_does_not_fit_is_refused_naming_the_field_not_coerced() -> None:
    avro = AvroFormat()
    schema = avro.compile('{"type": "record", "name": "P", "fields": [{"name": "amount", "type": "long"}]}')
    with pytest.raises(ValueError, match=r"Invalid value 5\.7 for type long at amount"):
        avro.write(schema, {"amount": 5.7}, b"")
    with pytest.raises(EOFError):
        avro.read(schema, b"\x80", 0)  # a long cut short
