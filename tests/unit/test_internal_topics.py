"""`internal_topics` in the app YAML: the replicas and configs every topic the runtime names after the app
is created with, what it refuses (naming the field), and the creation requests it makes."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from runtime.config import ConfigError, InternalTopicsConfig, parse_app
from runtime.kafka.topics import InternalTopic, declared_configs, internal_topic_request

APP: dict[str, Any] = {
    "app_id": "shop",
    "topics": {"payments": {"partitions": 3}, "totals": {"partitions": 4}},
    "processors": [{
        "name": "per-merchant",
        "class": "tests.support.apps:Echo",
        "inputs": ["payments"],
        "repartition": {"key": "merchant", "partitions": 4},
        "outputs": ["totals"],
        "params": {"output": "totals"},
        "stores": {"seen": {}},
    }],
    "errors": {"processing": "dead_letter"},
}  # fmt: skip

REPLICATED = {**APP, "internal_topics": {"replication_factor": 3, "configs": {"min.insync.replicas": "2"}}}


def test_by_default_every_topic_is_created_with_the_brokers_default_replication() -> None:
    app = parse_app(APP)
    assert app.internal_topics == InternalTopicsConfig(replication_factor=-1, configs={})
    assert {name: spec.replication_factor for name, spec in app.topics.items()} == {
        "payments": -1, "totals": -1, "shop-per-merchant-repartition": -1, "shop-dead-letters": -1
    }  # fmt: skip


def test_the_topics_the_runtime_adds_take_the_internal_setting_and_declared_ones_keep_theirs() -> None:
    app = parse_app({**REPLICATED, "topics": {**APP["topics"], "totals": {"partitions": 4, "replication_factor": 2}}})
    assert app.derived_topics() == {"shop-per-merchant-repartition", "shop-dead-letters"}
    for name in app.derived_topics():
        assert app.topics[name].replication_factor == 3
        assert declared_configs(app.topics[name]) == {"cleanup.policy": "delete", "min.insync.replicas": "2"}
    assert (app.topics["totals"].replication_factor, app.topics["payments"].replication_factor) == (2, -1)
    assert declared_configs(app.topics["payments"]) == {"cleanup.policy": "delete"}


def test_the_requests_carry_the_replicas_and_configs_and_compact_what_keeps_latest_values() -> None:
    settings = parse_app(REPLICATED).internal_topics
    changelog = internal_topic_request(settings, InternalTopic("shop-seen-changelog", 3, compacted=True), 3)
    assert (changelog.name, changelog.num_partitions, changelog.replication_factor) == ("shop-seen-changelog", 3, 3)
    assert changelog.topic_configs == {"min.insync.replicas": "2", "cleanup.policy": "compact"}
    requests = internal_topic_request(settings, InternalTopic("shop-replay-requests"), 3)
    assert (requests.num_partitions, requests.replication_factor) == (1, 3)
    assert requests.topic_configs == {"min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"replication_factor": 0}, r"internal_topics\.replication_factor: 0 is no number of replicas"),
        ({"replication_factor": -2}, r"internal_topics\.replication_factor: -2 is no number of replicas"),
        ({"replication_factor": 40000}, r"internal_topics\.replication_factor: 40000 is above 32767"),
        ({"replication_factor": "three"}, r"internal_topics\.replication_factor: Input should be a valid integer"),
        ({"configs": {"cleanup.policy": "delete"}}, r"internal_topics\.configs: cleanup\.policy is chosen by"),
        ({"configs": {"min.insync.replicas": 2}}, r"internal_topics\.configs\.min\.insync\.replicas: Input should"),
        ({"replicas": 3}, r"internal_topics\.replicas: Extra inputs are not permitted"),
    ],
)
def test_a_wrong_setting_names_its_field(section: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_app({**APP, "internal_topics": section})


def test_a_declared_topic_refuses_zero_replicas_too() -> None:
    app = copy.deepcopy(APP)
    app["topics"]["totals"]["replication_factor"] = 0
    with pytest.raises(ConfigError, match=re.escape("topics.totals.replication_factor: 0 is no number of replicas")):
        parse_app(app)
