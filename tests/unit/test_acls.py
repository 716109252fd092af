"""`python -m runtime acls`: the grants worked out from the YAML, as kafka-acls.sh commands; and how an
authorization error, wherever aiokafka raised it, is told as the permission to grant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from runtime import cli
from runtime.config import AppConfig
from runtime.errors import AccessDenied
from runtime.kafka.authorization import Authorization, RefusedOperation
from runtime.kafka.permissions import Resource

SASL = {"protocol": "SASL_SSL", "sasl": {"mechanism": "SCRAM-SHA-512", "username": "payments", "password": "pw"}}


def _app(**overrides: Any) -> dict[str, Any]:
    return {
        "app_id": "pay",
        "kafka": {"bootstrap_servers": "broker:9093", "security": SASL},
        "guarantee": "exactly_once",
        "topics": {"in": {}, "out": {}, "rows": {"cleanup_policy": "compact"}},
        "processors": [
            {"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": ["in"], "outputs": ["out"],
             "params": {"output": "out"}, "stores": {"counts": {}}},
        ],
        "outboxes": {"orders": {"table": "orders", "topic": "out"}},
        "table_followers": {"accounts": {"table": "accounts", "topic": "rows", "key_column": "id",
                                         "version_column": "v"}},
        **overrides,
    }  # fmt: skip


def _printed(tmp_path: Path, capsys: pytest.CaptureFixture[str], app: dict[str, Any], *options: str) -> str:
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(app))
    assert cli.main(["acls", str(path), *options]) == 0
    return capsys.readouterr().out


def _commands(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if line.startswith("kafka-acls.sh ")]


def test_every_resource_the_runtime_touches_is_granted_under_a_comment_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = _printed(tmp_path, capsys, _app())
    commands = _commands(printed)
    start = "kafka-acls.sh --bootstrap-server broker:9093 --add --allow-principal User:payments"
    assert all(command.startswith(start) for command in commands), commands
    expected = [
        "--operation Read --operation Describe --group pay",
        "--operation Read --operation Describe --operation DescribeConfigs --operation Create --topic in",
        "--operation Write --operation Describe --operation DescribeConfigs --operation Create "
        "--topic out --topic rows",
        "--operation Create --operation Read --operation Write --operation Describe --operation DescribeConfigs "
        "--topic pay-counts-changelog --topic pay-outbox-orders-position --topic pay-follower-accounts-position",
        "--operation Create --operation Read --operation Describe --topic pay-singletons",
        "--operation Read --operation Describe --group pay-singleton- --resource-pattern-type prefixed",
        "--operation Write --operation Describe --transactional-id pay- --resource-pattern-type prefixed",
        "--operation DescribeConfigs --cluster",
    ]
    assert [command.removeprefix(start + " ") for command in commands] == expected
    assert f"# {start} --operation IdempotentWrite --cluster" in printed  # brokers before 3.0 only
    blocks = printed.split("\n\n")[1:]
    assert all(block.startswith("# ") for block in blocks), blocks  # each group says what it is for


def test_without_exactly_once_or_sources_there_is_no_transactional_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = _app(guarantee="at_least_once", outboxes={}, table_followers={}, create_topics=False)
    printed = _printed(tmp_path, capsys, app, "--principal", "User:CN=pay app,O=Example")
    assert "--transactional-id" not in printed and "singleton" not in printed
    assert "--allow-principal 'User:CN=pay app,O=Example'" in printed
    assert "--operation Read --operation Describe --operation DescribeConfigs --topic in" in printed  # no Create


def test_replay_jobs_and_rewind_add_their_own_grants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed = _printed(tmp_path, capsys, _app(guarantee="at_least_once"), "--replay-jobs", "--rewind")
    assert "--topic pay-replay-requests --topic pay-replay-jobs" in printed
    assert "--group pay-replay-intake" in printed and "--topic pay-rewinds" in printed


def test_a_principal_the_yaml_does_not_name_must_be_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(_app(kafka={"bootstrap_servers": "broker:9092"})))
    for options in ([], ["--principal", "payments"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(["acls", str(path), *options])
        assert exited.value.code == 2
        assert "--principal" in capsys.readouterr().err


AUTHORIZATION = Authorization("broker:9093", "User:payments", {"in": "Read", "out": "Write"})
GRANT = "grant it (python -m runtime acls app.yaml lists every ACL the app needs)"


@pytest.mark.parametrize(
    ("error", "told"),
    [
        (TopicAuthorizationFailedError("in"), "Read on topic 'in'"),
        (TopicAuthorizationFailedError({"out"}), "Write on topic 'out'"),
        (TopicAuthorizationFailedError("elsewhere"), "Describe on topic 'elsewhere'"),
        (GroupAuthorizationFailedError("pay"), "Read on group 'pay'"),
        (TransactionalIdAuthorizationFailed("pay-count-0"), "Write on transactional-id 'pay-count-0'"),
        (ClusterAuthorizationFailedError(), "IdempotentWrite on cluster 'kafka-cluster'"),
        (RefusedOperation(Resource.TOPIC, "Create", "out"), "Create on topic 'out'"),
    ],
)
def test_each_authorization_error_is_told_as_the_permission_to_grant(error: Exception, told: str) -> None:
    denied = AUTHORIZATION.translated(error)
    assert isinstance(denied, AccessDenied)
    assert str(denied) == f"Kafka at broker:9093 refused User:payments {told}: {GRANT}"


def test_an_authorization_error_is_found_behind_what_it_caused() -> None:
    try:
        try:
            raise GroupAuthorizationFailedError("pay")
        except GroupAuthorizationFailedError as error:
            raise RuntimeError("the commit failed") from error
    except RuntimeError as caused:
        assert "Read on group 'pay'" in str(AUTHORIZATION.translated(ExceptionGroup("tasks", [caused])))
    other = KafkaConnectionError("down")
    assert AUTHORIZATION.translated(other) is other


def test_the_principal_comes_from_the_sasl_user_name() -> None:
    app = AppConfig.model_validate(_app())
    assert Authorization.of("broker:9093", app.kafka, app).principal == "User:payments"
    assert Authorization.of("broker:9093", AppConfig.model_validate(_app(kafka={})).kafka, None).principal == (
        "the app's principal"
    )
