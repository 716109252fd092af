"""The group consumer's heartbeat: a second unless the YAML sets one, a third of a shorter session at most,
so that the second round of a cooperative rebalance is not three seconds away."""

from __future__ import annotations

import copy
from typing import Any

from runtime.config import parse_app
from runtime.kafka.connection import Clients
from tests.unit.test_config_cli import VALID


def heartbeat(kafka: dict[str, Any]) -> int:
    app = copy.deepcopy(VALID)
    app["kafka"] = kafka
    return int(Clients(parse_app(app), "x:9").group_consumer_options(6)["heartbeat_interval_ms"])


def test_a_second_by_default_and_a_third_of_a_shorter_session() -> None:
    assert heartbeat({}) == 1000
    assert heartbeat({"consumer": {"session_timeout_ms": 1500}}) == 500


def test_the_yamls_heartbeat_wins() -> None:
    assert heartbeat({"consumer": {"heartbeat_interval_ms": 2500}}) == 2500
