"""`kafka.group_instance_id`: each worker joins its group as a static member with its own id (the YAML's
with the worker's index appended); none set, no worker is a static member."""

from __future__ import annotations

import copy

import pytest

from runtime.config import ConfigError, parse_app
from runtime.kafka.connection import Clients
from runtime.worker.supervisor import for_worker
from tests.unit.test_config_cli import VALID


def with_instance_id(instance_id: object) -> dict[str, object]:
    app = copy.deepcopy(VALID)
    app.setdefault("kafka", {})["group_instance_id"] = instance_id
    return app


def test_each_worker_joins_with_the_yamls_id_and_its_index() -> None:
    app = parse_app(with_instance_id("payments-validator-2"))
    ids = [Clients(for_worker(app, index), "x:9").group_consumer_options(6)["group_instance_id"] for index in range(3)]
    assert ids == ["payments-validator-2-0", "payments-validator-2-1", "payments-validator-2-2"]


def test_without_one_no_worker_is_a_static_member() -> None:
    app = parse_app(VALID)
    assert "group_instance_id" not in Clients(for_worker(app, 1), "x:9").group_consumer_options(6)
    assert "group_instance_id" not in Clients(app, "x:9").consumer_options()


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        (with_instance_id("pod 0"), r"kafka\.group_instance_id: String should match pattern"),
        (with_instance_id(""), r"kafka\.group_instance_id: String should match pattern"),
    ],
)
def test_a_wrong_id_names_its_field(app: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_app(app)


def test_the_consumers_own_option_is_refused_for_the_runtimes() -> None:
    app = copy.deepcopy(VALID)
    app.setdefault("kafka", {}).setdefault("consumer", {})["group_instance_id"] = "pod-0"
    with pytest.raises(
        ConfigError, match=r"kafka\.consumer\.group_instance_id: set by the runtime.*kafka\.group_instance_id"
    ):
        parse_app(app)
