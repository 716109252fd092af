"""Tables in the app YAML: what the config makes of them, what it refuses (naming the field), and how
`describe` shows them."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from runtime.commands.describe import render, topology
from runtime.config import ConfigError, parse_app

APP: dict[str, Any] = {
    "app_id": "shop",
    "topics": {
        "orders": {"partitions": 4, "key_serde": "str", "value_serde": "json"},
        "customers": {"partitions": 4, "key_serde": "str", "value_serde": "json", "cleanup_policy": "compact"},
        "enriched": {"partitions": 4, "key_serde": "str", "value_serde": "json"},
    },
    "processors": [{
        "name": "enrich",
        "class": "processors.joins:TableJoin",
        "inputs": ["orders"],
        "tables": {"customers": {"topic": "customers"}},
        "outputs": ["enriched"],
        "params": {"table": "customers", "output": "enriched", "join": "left"},
    }],
}  # fmt: skip


def test_a_table_is_read_by_the_group_and_describe_shows_it_as_its_own_changelog() -> None:
    app = parse_app(APP)
    assert app.input_topics() == ["customers", "orders"]
    assert app.processors[0].table_topics() == ["customers"]
    described = topology(app)
    assert described.internal_topics == [], "no changelog topic of its own"
    assert described.processors[0].co_partitioned
    assert "  table   customers into store customers (rocksdb), co-partitioned; the topic is its changelog\n" in (
        render(described) + "\n"
    )


def test_a_table_keeps_history_for_the_milliseconds_or_the_duration_it_is_given() -> None:
    for given, expected in ((86_400_000, 86_400_000), ("1d", 86_400_000), ("15m", 900_000)):
        app = copy.deepcopy(APP)
        app["processors"][0]["tables"]["customers"]["history_ms"] = given
        assert parse_app(app).processors[0].tables["customers"].history_ms == expected
    assert parse_app(APP).processors[0].tables["customers"].history_ms is None
    app = copy.deepcopy(APP)
    app["processors"][0]["tables"]["customers"]["history_ms"] = "1h"
    assert "its changelog; keeps 3600000 ms of history\n" in render(topology(parse_app(app))) + "\n"


def edit(path: str, value: Any) -> Any:
    def apply(app: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = app
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value

    return apply


def both(*edits: Any) -> Any:
    def apply(app: dict[str, Any]) -> None:
        for change in edits:
            change(app)

    return apply


CASES = [
    (edit("processors.0.tables.customers.topic", "nowhere"),
     r"processors\[0\]\.tables\.customers\.topic: topic 'nowhere' is not declared under topics"),
    (edit("topics.customers.cleanup_policy", "delete"),
     r"processors\[0\]\.tables\.customers\.topic: topic 'customers' is not compacted"),
    (edit("topics.customers.partitions", 2),
     r"processors\[0\]\.inputs: inputs of one processor must be co-partitioned"),
    (edit("processors.0.tables.customers.topic", "orders"),
     r"processors\[0\]\.tables: customers: topic 'orders' is also an input"),
    (edit("processors.0.stores", {"customers": {}}),
     r"tables\.customers: the name is also one of the processor's stores"),
    (edit("processors.0.params.table", "suppliers"),
     r"processors\[0\]\.params\.table: 'suppliers' is not among the processor's tables \['customers'\]"),
    (edit("processors.0.params.join", "outer"), r"processors\[0\]\.params\.join: Input should be 'inner' or 'left'"),
    (edit("processors.0.tables.customers.history_ms", 0),
     r"processors\[0\]\.tables\.customers\.history_ms: Input should be greater than 0"),
    (edit("processors.0.tables.customers.history_ms", True),
     r"processors\[0\]\.tables\.customers\.history_ms: history_ms is a positive number of milliseconds"),
    (edit("processors.0.tables.customers.history_ms", "a day"),
     r"processors\[0\]\.tables\.customers\.history_ms: 'a day' is not a duration"),
    (both(edit("topics.customers.timestamp", {"field": "at"}), edit("processors.0.tables.customers.history_ms", 60)),
     r"processors\[0\]\.tables\.customers\.history_ms: topic 'customers' has a timestamp setting"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "expected"), CASES)
def test_a_mistake_names_its_field(change: Any, expected: str) -> None:
    app = copy.deepcopy(APP)
    change(app)
    with pytest.raises(ConfigError) as raised:
        parse_app(app)
    assert re.search(expected, str(raised.value)), f"{expected!r} not in {raised.value}"
