"""`repartition:` in the app YAML: the stage the config puts in front of the processor, the topic it adds,
what it refuses (naming the field), and the stage's own behaviour without a broker."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import pytest

from processors.context import Context
from processors.merge import MergeProcessor
from processors.record import Record
from processors.repartition import Rekey
from runtime.commands.describe import render, topology
from runtime.config import ConfigError, parse_app
from tests.support.window_context import WindowContext

APP: dict[str, Any] = {
    "app_id": "shop",
    "topics": {"payments": {"partitions": 3, "value_serde": "json"}, "totals": {"partitions": 4}},
    "processors": [{
        "name": "per-merchant",
        "class": "tests.support.apps:Echo",
        "inputs": ["payments"],
        "repartition": {"key": "merchant", "partitions": 4, "key_serde": "str"},
        "outputs": ["totals"],
        "params": {"output": "totals"},
    }],
}  # fmt: skip


def test_the_processor_reads_the_apps_repartition_topic_which_a_rekeying_stage_writes() -> None:
    app = parse_app(APP)
    stage, processor = app.processors
    topic = "shop-per-merchant-repartition"
    assert (stage.name, stage.class_path, stage.inputs, stage.outputs) == (
        "per-merchant-repartition", "processors.repartition:Rekey", ["payments"], [topic]
    )  # fmt: skip
    assert stage.params == {"key": "merchant", "output": topic}
    assert processor.inputs == [topic] and processor.repartition_topic == topic
    spec = app.topics[topic]
    assert (spec.partitions, spec.key_serde, spec.value_serde) == (4, "str", "msgpack")
    assert app.repartition_topics() == [topic]
    described = render(topology(app))
    assert f"  {topic}  repartition: the inputs of per-merchant, re-keyed (purged once read), 4 partitions" in described
    assert "processor per-merchant-repartition (processors.repartition:Rekey)" in described


def test_the_partitions_default_to_the_inputs() -> None:
    app = copy.deepcopy(APP)
    del app["processors"][0]["repartition"]["partitions"]
    assert parse_app(app).topics["shop-per-merchant-repartition"].partitions == 3


@pytest.mark.parametrize(
    ("repartition", "expected"),
    [
        ({"key": "nowhere:function"}, r"processors\[0\]\.repartition\.key: .*cannot import the key function"),
        ({"key": ""}, r"processors\[0\]\.repartition\.key: .*expected the name of a field"),
        ({"key": "merchant", "partitions": 0}, r"processors\[0\]\.repartition\.partitions: "),
        ({"key": "merchant", "key_serde": "yaml"}, r"processors\[0\]\.repartition\.key_serde: "),
        ({"by": "merchant"}, r"processors\[0\]\.repartition\.by: Extra inputs are not permitted"),
    ],
)
def test_a_mistake_names_its_field(repartition: dict[str, Any], expected: str) -> None:
    app = copy.deepcopy(APP)
    app["processors"][0]["repartition"] = repartition
    with pytest.raises(ConfigError) as raised:
        parse_app(app)
    assert re.search(expected, str(raised.value)), f"{expected!r} not in {raised.value}"


def test_the_stage_keys_each_record_by_the_field_and_a_record_without_it_raises() -> None:
    context = WindowContext({"key": "merchant", "output": "out"}, {})
    stage = Rekey()
    stage.init(context)
    stage.process(Record("in", 0, 0, 5, "acc-1", {"merchant": "m3", "amount": 7}, [("h", b"v")]), context)
    [sent] = context.taken("out")
    assert (sent.key, sent.value, sent.headers) == ("m3", {"merchant": "m3", "amount": 7}, (("h", b"v"),))
    with pytest.raises(KeyError, match="no field 'merchant'"):
        stage.process(Record("in", 0, 1, 6, "acc-1", {"amount": 7}), context)


def test_a_merge_processor_takes_no_repartition() -> None:
    """One topic would merge its inputs, and stamps of the upstream progress would reach its `choose`."""
    app = copy.deepcopy(APP)
    app["processors"][0]["class"] = "tests.unit.test_repartition_config:EarliestFirst"
    with pytest.raises(ConfigError, match=r"processors\[0\]: .*repartition: a merge processor chooses among"):
        parse_app(app)


class EarliestFirst(MergeProcessor):
    def choose(self, heads: Mapping[str, Record]) -> str | None:
        return min(heads, key=lambda topic: heads[topic].timestamp)

    def process(self, record: Record, ctx: Context) -> None:
        ctx.send("totals", record.value)
