"""Broadcast inputs and the merge join in the app YAML: what the config adds for them, what it refuses (naming
the field, exit 2), and how `describe` shows them."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from runtime.commands.describe import render, topology
from runtime.config import ConfigError, load_app, parse_app
from tests.support.config_cli import GUARD_MARKER, install_network_guard, run_cli, write_yaml
from tests.support.running import REPO

EXAMPLE = REPO / "examples" / "cdc_merge" / "app.yaml"


def example() -> dict[str, Any]:
    app = load_app(EXAMPLE)
    return app.model_dump(mode="json", by_alias=True, exclude={"processors": {0: {"stores"}}})


def test_a_processor_with_broadcast_inputs_gets_a_changelogged_store_of_its_positions() -> None:
    app = load_app(EXAMPLE)
    [merge] = app.processors
    assert merge.inputs == ["cdc-data"] and merge.broadcast == ["cdc-transactions"]
    store = merge.stores["merge-broadcast-positions"]
    assert (store.kind, store.backend, store.changelog) == ("key_value", "rocksdb", True)
    assert app.input_topics() == ["cdc-data"], "the group reads the partitioned inputs only"
    assert app.broadcast_topics() == ["cdc-transactions"]


def test_describe_shows_a_broadcast_input_and_the_positions_store() -> None:
    described = render(topology(load_app(EXAMPLE)))
    assert "  reads   cdc-data: 6 partitions\n" in described
    assert "  reads   cdc-transactions: broadcast, every task reads its 1 partition at its own position\n" in described
    assert "  store   merge-broadcast-positions: rocksdb, changelog cdc-merge-merge-broadcast-positions-changelog" in (
        described
    )


def broadcast(topics: list[str]) -> Any:
    return lambda app: app["processors"][0].update(broadcast=topics)


def param(**changes: Any) -> Any:
    return lambda app: app["processors"][0]["params"].update(changes)


def partitions(topic: str, count: int) -> Any:
    return lambda app: app["topics"][topic].update(partitions=count)


CASES = [
    (broadcast(["cdc-transactions", "cdc-data"]), r"processors\[0\]\.broadcast: topic 'cdc-data' is also under inputs"),
    (broadcast(["cdc-transactions"] * 2), r"processors\[0\]\.broadcast: a topic is listed twice"),
    (
        broadcast(["cdc-transactions", "nowhere"]),
        r"processors\[0\]\.broadcast: topic 'nowhere' is not declared under topics",
    ),
    (partitions("cdc-transactions", 2), r"processors\[0\]\.broadcast: topic 'cdc-transactions' has 2 partitions"),
    (broadcast([]), r"params\.transactions: .*among neither the processor's inputs nor its broadcast inputs"),
    (param(data="cdc-transactions"), r"params\.data: topic 'cdc-transactions' is not among the processor's inputs"),
    (param(output="cdc-data"), r"params\.output: topic 'cdc-data' is not among the processor's outputs"),
    (param(data_id=None), r"params\.data_id: Input should be a valid string"),
    (partitions("cdc-data", 2), r"processors\[0\]\.inputs: .*co-partitioned"),  # the output has 6: fine; inputs
]


@pytest.mark.parametrize(("edit", "expected"), CASES)
def test_a_mistake_names_its_field(edit: Any, expected: str) -> None:
    app = example()
    edit(app)
    if "co-partitioned" in expected:  # a second partitioned input of another count
        app["topics"]["cdc-extra"] = {"partitions": 3}
        app["processors"][0]["inputs"].append("cdc-extra")
    with pytest.raises(ConfigError) as raised:
        parse_app(app)
    assert re.search(expected, str(raised.value)), f"{expected!r} not in {raised.value}"


def test_the_command_exits_2_naming_the_field_before_it_connects(tmp_path: Path) -> None:
    app = copy.deepcopy(example())
    app["processors"][0]["broadcast"] = ["cdc-transactions", "cdc-data"]
    path = write_yaml(tmp_path / "app.yaml", app)
    result = run_cli(path, install_network_guard(tmp_path / "guard"))
    assert GUARD_MARKER not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert "  processors[0].broadcast: topic 'cdc-data' is also under inputs; an input is one or the other\n" in (
        result.stderr
    )
