"""The commands without a broker: `describe`, --help, the JSON-lines form of records, and their options."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.cli import COMMANDS
from runtime.commands.consume import starting_point
from runtime.commands.describe import render, topology
from runtime.commands.json_lines import from_jsonable, jsonable, raw_bytes, raw_jsonable
from runtime.commands.positions import Position
from runtime.commands.produce import OutgoingRecord, parse_record
from runtime.commands.reset import reset_point
from runtime.commands.topic_serdes import declared_serdes, topic_serdes
from runtime.config import parse_app
from tests.support.running import REPO, write_app

APP: dict[str, Any] = {
    "app_id": "shop",
    "topics": {
        "orders": {"partitions": 4, "key_serde": "str", "value_serde": "json"},
        "payments": {"partitions": 4},
        "matched": {"partitions": 4},
        "report": {"partitions": 1, "value_serde": "json"},
    },
    "processors": [
        {"name": "match", "class": "tests.support.apps:CountPerKey", "inputs": ["orders", "payments"],
         "outputs": ["matched"], "stores": {"counts": {"key_serde": "str"}, "scratch": {"changelog": False,
                                                                                       "backend": "memory"}}},
        {"name": "report", "class": "tests.support.apps:Echo", "inputs": ["matched"], "outputs": ["report"]},
    ],
    "global_stores": {"rates": {"topic": "fx-rates", "key_serde": "str", "value_serde": "json"}},
    "errors": {"processing": "dead_letter"},
}  # fmt: skip


def test_describe_shows_the_topology_the_yaml_declares() -> None:
    described = asdict(topology(parse_app(APP)))
    assert described["app_id"] == "shop" and described["group"] == "shop"
    match, report = described["processors"]
    assert (match["tasks"], match["co_partitioned"], report["co_partitioned"]) == (4, True, False)
    assert match["inputs"] == [
        {"topic": "orders", "partitions": 4, "written_by": []},
        {"topic": "payments", "partitions": 4, "written_by": []},
    ]
    assert match["outputs"] == [{"topic": "matched", "read_by": ["report"]}]
    assert report["inputs"] == [{"topic": "matched", "partitions": 4, "written_by": ["match"]}]
    assert match["stores"] == [
        {"name": "counts", "backend": "rocksdb", "changelog": "shop-counts-changelog", "key_serde": "str",
         "value_serde": "msgpack"},
        {"name": "scratch", "backend": "memory", "changelog": None, "key_serde": "msgpack", "value_serde": "msgpack"},
    ]  # fmt: skip
    assert described["global_stores"] == [
        {"name": "rates", "topic": "fx-rates", "backend": "rocksdb", "key_serde": "str", "value_serde": "json",
         "updater": None}
    ]  # fmt: skip
    assert described["internal_topics"] == [
        {"topic": "shop-counts-changelog", "purpose": "changelog of store counts (compacted)", "partitions": 4,
         "replication_factor": -1},
        {"topic": "shop-dead-letters", "purpose": "dead letters", "partitions": 1, "replication_factor": -1},
    ]  # fmt: skip


def test_describe_shows_the_replication_internal_topics_are_created_with() -> None:
    replicated = {**APP, "internal_topics": {"replication_factor": 3, "configs": {"min.insync.replicas": "2"}}}
    text = render(topology(parse_app(replicated)))
    assert "shop-counts-changelog  changelog of store counts (compacted), 4 partitions, replication factor 3\n" in text
    assert "shop-dead-letters      dead letters, 1 partition, replication factor 3" in text
    default = render(topology(parse_app(APP)))
    assert "dead letters, 1 partition, the broker's default replication factor" in default


def test_describe_as_the_command_prints_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "runtime", "describe", str(write_app(tmp_path, APP))],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == render(topology(parse_app(APP))) + "\n"
    assert "  reads   orders, payments: 4 partitions each, co-partitioned\n" in result.stdout
    assert "  reads   matched (from match): 4 partitions\n" in result.stdout
    assert "  rates: topic fx-rates, rocksdb, keys str, values json\n" in result.stdout


def test_describe_reports_a_mistake_in_the_yaml_as_running_it_does(tmp_path: Path) -> None:
    broken = write_app(tmp_path, {**APP, "guarantee": "twice"})
    result = subprocess.run(
        [sys.executable, "-m", "runtime", "describe", str(broken)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith(f"error in {broken}:\n  guarantee: Input should be")


def test_replay_given_no_broker_says_so_instead_of_starting_an_empty_one(tmp_path: Path) -> None:
    environment = {name: value for name, value in os.environ.items() if name != "KAFKA_BOOTSTRAP_SERVERS"}
    result = subprocess.run(
        [sys.executable, "-m", "runtime", "replay", "payments", "--key", "acc-1"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        env={**environment, "RUNTIME_CACHE_DIR": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        "error: no broker named: give --app APP.yaml (its kafka.bootstrap_servers) or set KAFKA_BOOTSTRAP_SERVERS; "
        "the local development broker is not running (`python -m runtime dev-kafka start`)\n"
    )
    assert not (tmp_path / "dev-kafka").exists(), "no broker was started"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "runtime", command, "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m runtime {command}")


def test_the_top_level_help_lists_the_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "runtime", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    for command, (_, what) in COMMANDS.items():
        assert f"  {command}" in result.stdout and what in result.stdout


def test_a_usage_mistake_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "runtime", "produce", "orders", "--rate", "fast"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "argument --rate: 'fast' is not a positive number of records per second" in result.stderr


def test_json_holds_what_serdes_decode() -> None:
    decoded = {"bytes": b"\x00\xff", 7: [Decimal("1.50"), (1, 2)], b"key": None}
    assert jsonable(decoded) == {"bytes": {"$base64": "AP8="}, 7: ["1.50", [1, 2]], "key": None}
    assert from_jsonable({"bytes": {"$base64": "AP8="}, "list": [{"$base64": "AQ=="}]}) == {
        "bytes": b"\x00\xff",
        "list": [b"\x01"],
    }
    assert raw_jsonable(b"text") == "text" and raw_jsonable(b"\xff") == {"$base64": "/w=="}
    assert raw_bytes("text", "the key") == b"text" and raw_bytes({"$base64": "/w=="}, "the key") == b"\xff"
    with pytest.raises(ValueError, match=r'the key must be text or \{"\$base64": "..."\}, not 5'):
        raw_bytes(5, "the key")


def test_a_line_becomes_a_record_encoded_with_the_topics_serdes() -> None:
    serdes = topic_serdes(parse_app(APP), "payments", None, None)  # msgpack keys and values
    line = b'{"key": "k", "value": {"n": 1}, "headers": {"h": "v"}, "timestamp": 5, "partition": 3}'
    assert parse_record(line, serdes, 4) == OutgoingRecord(
        msgpack.packb("k"), msgpack.packb({"n": 1}), [("h", b"v")], 5, 3
    )
    assert parse_record(b"{}", serdes, 4) == OutgoingRecord(None, None, None, None, None)
    with pytest.raises(ValueError, match="the value cannot be encoded with the topic's value serde: TypeError"):
        parse_record(b'{"value": {"$base64": "AA=="}}', topic_serdes(None, "t", None, "json"), 1)


def test_a_topics_serdes_come_from_the_yaml_for_changelogs_and_global_stores_too() -> None:
    app = parse_app(APP)
    assert declared_serdes(app, "orders") == ("str", "json")
    assert declared_serdes(app, "shop-counts-changelog") == ("str", "msgpack")
    assert declared_serdes(app, "fx-rates") == ("str", "json")
    assert declared_serdes(app, "shop-dead-letters") == ("bytes", "bytes")
    assert declared_serdes(app, "elsewhere") == declared_serdes(None, "orders") == ("bytes", "bytes")


def test_where_consume_starts_and_reset_goes() -> None:
    assert starting_point("beginning") == Position("beginning")
    assert starting_point("-5") == Position("offset", -5)
    assert starting_point("2026-01-01T00:01:00Z") == Position("time", 1767225660000)
    assert starting_point("2026-01-01T02:01:00+02:00") == Position("time", 1767225660000)
    assert starting_point("2026-01-01T00:01") == Position("time", 1767225660000), "UTC unless an offset is given"
    assert reset_point("earliest") == Position("beginning") and reset_point("latest") == Position("end")
    with pytest.raises(argparse.ArgumentTypeError, match="'soon' is not 'earliest', 'latest' or an ISO 8601 time"):
        reset_point("soon")
