"""Avro and JSON Schema serdes against a real schema registry (Apicurio Registry, in memory) and a real
broker: records another client wrote with the registry are read, and what the app writes that client
reads back; a schema evolves; records the registry cannot explain follow the deserialization policy."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pydantic import SecretStr

from runtime.config.schema_registry import SchemaRegistryConfig
from runtime.schema_registry.client import RegistryClient, RegistryRefused, RegistryUnavailable, SchemaNotFound
from runtime.schema_registry.serdes import registry_serde
from tests.conftest import TopicNamer
from tests.support.commands import json_lines, run_command
from tests.support.kafka_helpers import KEPT, create_topic, produce, read_topic
from tests.support.registry_proxy import authenticating_proxy
from tests.support.running import spawn_worker, write_app

pytestmark = pytest.mark.anyio

PAYMENT = {
    "type": "record", "name": "Payment", "namespace": "shop",
    "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}],
}  # fmt: skip
# The same record, a field added with a default: readers of either version read records of both.
PAYMENT_V2 = {**PAYMENT, "fields": [*PAYMENT["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
TAXED = {**PAYMENT, "name": "TaxedPayment", "fields": [*PAYMENT["fields"], {"name": "tax", "type": "long"}]}
ORDER = {
    "type": "object", "title": "Order",
    "properties": {"id": {"type": "string"}, "items": {"type": "array", "items": {"type": "integer"}}},
    "required": ["id"],
}  # fmt: skip


def schema_file(directory: Path, name: str, schema: dict[str, Any]) -> Path:
    path = directory / name
    path.write_text(json.dumps(schema))
    return path


def fresh_topic() -> str:
    return f"registry-{uuid.uuid4().hex[:8]}"


def test_a_field_added_with_a_default_is_read_by_the_old_and_the_new_reader(
    schema_registry: str, tmp_path: Path
) -> None:
    registry = RegistryClient(SchemaRegistryConfig(url=schema_registry))
    topic = fresh_topic()
    old = registry_serde("avro", registry, topic, "value", schema_file(tmp_path, "v1.avsc", PAYMENT))
    new = registry_serde("avro", registry, topic, "value", schema_file(tmp_path, "v2.avsc", PAYMENT_V2))
    written_old = old.serialize({"id": "p1", "amount": 250})
    written_new = new.serialize({"id": "p2", "amount": 300, "currency": "SEK"})
    assert written_old[0] == 0 and written_old[1:5] != written_new[1:5], "each names its own schema id"

    assert new.deserialize(written_old) == {"id": "p1", "amount": 250, "currency": "EUR"}, "the default"
    assert old.deserialize(written_new) == {"id": "p2", "amount": 300}, "the new field left out"
    latest = registry_serde("avro", registry, topic, "value", None)  # no schema file: each record's own
    assert latest.deserialize(written_new) == {"id": "p2", "amount": 300, "currency": "SEK"}
    assert latest.serialize({"id": "p3", "amount": 1, "currency": "NOK"})[1:5] == written_new[1:5], "the latest"


def test_records_the_registry_cannot_explain_fail_to_deserialize(schema_registry: str, tmp_path: Path) -> None:
    registry = RegistryClient(SchemaRegistryConfig(url=schema_registry))
    avro = registry_serde("avro", registry, fresh_topic(), "value", schema_file(tmp_path, "p.avsc", PAYMENT))
    written = avro.serialize({"id": "p1", "amount": 5})
    with pytest.raises(SchemaNotFound, match="schema id 999999 is not in the schema registry"):
        avro.deserialize(b"\x00" + (999999).to_bytes(4, "big") + written[5:])
    with pytest.raises(ValueError, match="not in the schema registry's wire format: 9 bytes, starts with byte 123"):
        avro.deserialize(b'{"id": 1}')
    with pytest.raises(EOFError):
        avro.deserialize(written[:6])  # cut short

    orders = registry_serde("json_schema", registry, fresh_topic(), "value", schema_file(tmp_path, "o.json", ORDER))
    order = {"id": "o1", "items": [1, 2]}
    written_order = orders.serialize(order)
    assert (written_order[0], json.loads(written_order[5:])) == (0, order)
    assert orders.deserialize(written_order) == order
    with pytest.raises(ValueError, match="data must contain"):
        orders.serialize({"items": [1]})
    with pytest.raises(ValueError, match=r"data\.items\[0\] must be integer"):
        orders.deserialize(written_order[:5] + b'{"id": "o2", "items": ["x"]}')
    with pytest.raises(ValueError, match=r"schema id \d+ is a AVRO schema, not JSON"):
        orders.deserialize(written)


def test_a_registry_out_of_reach_is_no_records_fault(tmp_path: Path) -> None:
    registry = RegistryClient(SchemaRegistryConfig(url="http://127.0.0.1:1/apis/ccompat/v7", timeout_s=2))
    avro = registry_serde("avro", registry, fresh_topic(), "value", schema_file(tmp_path, "p.avsc", PAYMENT))
    with pytest.raises(RegistryUnavailable, match=r"the schema registry at http://127.0.0.1:1/apis/ccompat/v7 cannot"):
        avro.serialize({"id": "p1", "amount": 5})


def avro_app(
    topic_name: TopicNamer, tmp_path: Path, bootstrap: str, registry: str, **extra: Any
) -> tuple[dict[str, Any], str, str]:
    source, sink = topic_name("payments"), topic_name("taxed")
    app = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": bootstrap},
        "schema_registry": {"url": registry},
        "topics": {
            source: {"key_serde": "str", "value_serde": "avro",
                     "value_schema": str(schema_file(tmp_path, "payment.avsc", PAYMENT))},
            sink: {"key_serde": "str", "value_serde": "avro",
                   "value_schema": str(schema_file(tmp_path, "taxed.avsc", TAXED))},
        },
        "processors": [{"name": "tax", "class": "tests.support.apps:Taxed", "inputs": [source], "outputs": [sink],
                        "params": {"output": sink}}],
        "state_dir": str(tmp_path / "state"),
        **extra,
    }  # fmt: skip
    return app, source, sink


async def test_an_avro_app_reads_what_another_client_wrote_and_writes_what_it_reads(
    kafka_bootstrap: str, schema_registry: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, source, sink = avro_app(topic_name, tmp_path, kafka_bootstrap, schema_registry)
    await create_topic(kafka_bootstrap, source)
    client = SchemaRegistryClient({"url": schema_registry})
    serializer = AvroSerializer(client, json.dumps(PAYMENT))
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    payments: list[dict[str, Any]] = [{"id": f"p{n}", "amount": n * 100} for n in range(20)]
    for payment in payments:
        value = serializer(payment, SerializationContext(source, MessageField.VALUE))
        producer.produce(source, value=value, key=payment["id"].encode())
    assert producer.flush(30) == 0

    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "app.log")
    assert await asyncio.to_thread(worker.wait, 120) == 0, (tmp_path / "app.log").read_text()

    deserializer = AvroDeserializer(client)
    outputs = [
        deserializer(record.value, SerializationContext(sink, MessageField.VALUE))
        for record in await read_topic(kafka_bootstrap, sink)
    ]
    assert outputs == [{**payment, "tax": payment["amount"] // 10} for payment in payments]
    assert client.get_latest_version(f"{sink}-value").schema.schema_str is not None, "registered on first write"


async def test_records_without_a_known_schema_follow_the_deserialization_policy(
    kafka_bootstrap: str, schema_registry: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, source, sink = avro_app(
        topic_name, tmp_path, kafka_bootstrap, schema_registry, errors={"deserialization": "dead_letter"}
    )
    await create_topic(kafka_bootstrap, source)
    registry = RegistryClient(SchemaRegistryConfig(url=schema_registry))
    good = registry_serde("avro", registry, source, "value", Path(app["topics"][source]["value_schema"]))
    unknown_id = b"\x00" + (999999).to_bytes(4, "big") + good.serialize({"id": "x", "amount": 1})[5:]
    records = [(b"a", good.serialize({"id": "a", "amount": 10})), (b"b", unknown_id), (b"c", b"not avro"),
               (b"d", good.serialize({"id": "d", "amount": 40}))]  # fmt: skip
    await produce(kafka_bootstrap, source, records)

    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "app.log")
    assert await asyncio.to_thread(worker.wait, 120) == 0, (tmp_path / "app.log").read_text()
    taxed = registry_serde("avro", registry, sink, "value", None)
    assert [taxed.deserialize(r.value)["id"] for r in await read_topic(kafka_bootstrap, sink)] == ["a", "d"]
    dead = await read_topic(kafka_bootstrap, f"{app['app_id']}-dead-letters")
    assert [(record.key, record.value) for record in dead] == records[1:3]
    messages = [dict(record.headers)["error.message"].decode() for record in dead]
    assert "schema id 999999 is not in the schema registry" in messages[0]
    assert "not in the schema registry's wire format" in messages[1]


async def test_a_registry_out_of_reach_stops_the_app_instead_of_dead_lettering(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, source, _ = avro_app(
        topic_name, tmp_path, kafka_bootstrap, "http://127.0.0.1:1/apis/ccompat/v7",
        errors={"deserialization": "dead_letter"},
    )  # fmt: skip
    await create_topic(kafka_bootstrap, source)
    await produce(kafka_bootstrap, source, [(b"a", b"\x00\x00\x00\x00\x01\x02a\x14")])
    log = tmp_path / "app.log"
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=log)
    assert await asyncio.to_thread(worker.wait, 120) == 1
    assert "error: the schema registry at http://127.0.0.1:1/apis/ccompat/v7 cannot be reached" in log.read_text()
    assert await read_topic(kafka_bootstrap, f"{app['app_id']}-dead-letters") == []


async def test_produce_and_consume_round_trip_avro_and_json_schema_values(
    kafka_bootstrap: str, schema_registry: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    payments, orders = topic_name("payments"), topic_name("orders")
    path = write_app(tmp_path, {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "schema_registry": {"url": schema_registry},
        "topics": {
            payments: {"key_serde": "str", "value_serde": "avro", "config": KEPT,
                       "value_schema": str(schema_file(tmp_path, "payment.avsc", PAYMENT_V2))},
            orders: {"key_serde": "str", "value_serde": "json_schema", "config": KEPT,
                     "value_schema": str(schema_file(tmp_path, "order.json", ORDER))},
        },
        "processors": [{"name": "p", "class": "tests.support.apps:Echo", "inputs": [payments]}],
    })  # fmt: skip
    assert run_command(kafka_bootstrap, "topics", "create", "--app", str(path)).returncode == 0
    for topic, value in (
        (payments, {"id": "p1", "amount": 5, "currency": "SEK"}),
        (orders, {"id": "o1", "items": [3]}),
    ):
        line = json.dumps({"key": "k", "value": value, "headers": {"h": "v"}, "timestamp": 1767225660000})
        produced = run_command(kafka_bootstrap, "produce", topic, "--app", str(path), stdin=line)
        assert produced.returncode == 0, produced.stderr
        (record,) = json_lines(run_command(kafka_bootstrap, "consume", topic, "--app", str(path)).stdout)
        assert (record["key"], record["value"], record["headers"]) == ("k", value, [["h", "v"]])
        assert record["timestamp"] == 1767225660000
        (raw,) = await read_topic(kafka_bootstrap, topic)
        assert raw.value is not None and raw.value[0] == 0, "the wire format: a zero byte, then the schema id"
    refused = run_command(kafka_bootstrap, "produce", orders, "--app", str(path), stdin='{"value": {"items": []}}')
    assert refused.returncode == 1 and "data must contain ['id'] properties" in refused.stderr


def test_credentials_reach_a_registry_that_asks_for_them_and_schemas_are_fetched_once_per_id(
    schema_registry: str, tmp_path: Path
) -> None:
    with authenticating_proxy(schema_registry, "app", "s3cret") as (url, passed):
        writer = RegistryClient(SchemaRegistryConfig(url=url, username="app", password=SecretStr("s3cret")))
        topic = fresh_topic()
        serde = registry_serde("avro", writer, topic, "value", schema_file(tmp_path, "v1.avsc", PAYMENT))
        written = [serde.serialize({"id": f"p{n}", "amount": n}) for n in range(50)]

        client = RegistryClient(SchemaRegistryConfig(url=url, username="app", password=SecretStr("s3cret")))
        reader = registry_serde("avro", client, topic, "value", None)
        assert [reader.deserialize(record)["id"] for record in written] == [f"p{n}" for n in range(50)]
        schema_id = int.from_bytes(written[0][1:5], "big")
        fetched = sum(count for path, count in passed.items() if path.endswith(f"/schemas/ids/{schema_id}"))
        assert fetched == 1, "50 records of one schema: it is fetched once, then taken from the cache"

        wrong = RegistryClient(SchemaRegistryConfig(url=url, username="app", password=SecretStr("guess")))
        refused = registry_serde("avro", wrong, fresh_topic(), "value", schema_file(tmp_path, "v1.avsc", PAYMENT))
        with pytest.raises(RegistryRefused, match="401"):
            refused.serialize({"id": "p", "amount": 1})
