"""The Spark jobs' security options stand for the app YAML's `kafka.security`, and become the Java client's."""

from __future__ import annotations

import pytest

from stores.kafka_security import KafkaSecurity
from stores.spark.__main__ import build_parser, main, security_of
from stores.spark.kafka_options import spark_kafka_options

SNAPSHOT = ["snapshot", "--bootstrap-servers=b:9093", "--topic=t", "--app=a", "--store=s", "--partitions=1", "--out=o"]


def test_the_options_and_the_environment_make_the_yaml_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "pw-63ac1e")
    args = build_parser().parse_args(
        [*SNAPSHOT, "--security-protocol=SASL_SSL", "--sasl-mechanism=SCRAM-SHA-256", "--sasl-username=alice"]
    )
    expected = {
        "protocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-256", "username": "alice", "password": "pw-63ac1e"},
    }
    assert security_of(args) == KafkaSecurity.model_validate(expected)


def test_sasl_becomes_the_java_clients_jaas_line() -> None:
    security = KafkaSecurity.model_validate(
        {"protocol": "SASL_SSL", "sasl": {"mechanism": "PLAIN", "username": 'al"ice', "password": "p\\w"}}
    )
    assert spark_kafka_options(security) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="al\\"ice" password="p\\\\w";'
        ),
    }


def test_oauthbearer_uses_kafkas_login_handler_with_the_token_endpoint() -> None:
    oauth = {
        "token_endpoint": "https://idp.example/token",
        "client_id": "app",
        "client_secret": "s-1f2e",
        "scope": "kafka",
    }
    security = KafkaSecurity.model_validate(
        {"protocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "OAUTHBEARER", "oauth": oauth}}
    )
    options = spark_kafka_options(security)
    assert options["kafka.sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/token"
    assert options["kafka.sasl.login.callback.handler.class"].endswith("OAuthBearerLoginCallbackHandler")
    assert options["kafka.sasl.jaas.config"].endswith('clientId="app" clientSecret="s-1f2e" scope="kafka";')


def test_incomplete_security_options_are_an_error_without_the_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "pw-never-shown-8d")
    assert main([*SNAPSHOT, "--security-protocol=SASL_SSL", "--sasl-username=alice"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: the Kafka security options: sasl.mechanism: Field required"), error
    assert "pw-never-shown-8d" not in error
