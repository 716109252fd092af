"""Apps and commands reach a secured broker through `kafka.security` alone, and a refused handshake stops them
at once with one line naming the broker and the cause, no secret in any output.

The test itself reads and writes over the broker's PLAINTEXT listener; the app is given only a secured one.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.devkafka import LocalBroker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import REPO, spawn_worker, write_app
from tests.support.token_endpoint import token_endpoint

pytestmark = pytest.mark.anyio

CLIENT_SECRET = "oauth-client-secret-5d8e2a"
RECORDS = 12

Security = Callable[[LocalBroker], dict[str, Any]]


def _users(broker: LocalBroker) -> dict[str, str]:
    assert broker.security is not None
    return dict(broker.security.users)


def _ca(broker: LocalBroker) -> str:
    assert broker.security is not None
    return str(broker.security.certificates.ca_file)


def _environment(broker: LocalBroker) -> dict[str, str]:
    """The secrets, handed to the app as `${VAR}` only: none is written into its YAML."""
    assert broker.security is not None
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TEST_KAFKA_PASSWORD": _users(broker)["alice"],
        "TEST_KEY_PASSWORD": broker.security.certificates.client_key_password,
        "TEST_CLIENT_SECRET": CLIENT_SECRET,
    }


def _secrets(broker: LocalBroker) -> list[str]:
    environment = _environment(broker)
    return [environment[name] for name in ("TEST_KAFKA_PASSWORD", "TEST_KEY_PASSWORD", "TEST_CLIENT_SECRET")]


def _tls(broker: LocalBroker) -> dict[str, Any]:
    return {"ca_file": _ca(broker)}


def _mutual_tls(broker: LocalBroker) -> dict[str, Any]:
    assert broker.security is not None
    certificates = broker.security.certificates
    return {
        "ca_file": _ca(broker),
        "cert_file": str(certificates.client_cert_file),
        "key_file": str(certificates.client_key_file),
        "key_password": "${TEST_KEY_PASSWORD}",
    }


def _scram(mechanism: str) -> dict[str, Any]:
    return {"mechanism": mechanism, "username": "alice", "password": "${TEST_KAFKA_PASSWORD}"}


SETUPS: dict[str, tuple[str, Security]] = {
    "ssl": ("SSL", lambda broker: {"protocol": "SSL", "tls": _tls(broker)}),
    "mutual-tls": ("MTLS", lambda broker: {"protocol": "SSL", "tls": _mutual_tls(broker)}),
    "sasl-ssl-scram-sha-512": (
        "SASL_SSL",
        lambda broker: {"protocol": "SASL_SSL", "tls": _tls(broker), "sasl": _scram("SCRAM-SHA-512")},
    ),
    "sasl-plaintext-scram-sha-256": (
        "SASL_PLAINTEXT",
        lambda _: {"protocol": "SASL_PLAINTEXT", "sasl": _scram("SCRAM-SHA-256")},
    ),
}


def _app(broker: LocalBroker, listener: str, security: dict[str, Any], names: TopicNamer, tmp_path: Path) -> Path:
    return write_app(tmp_path, {
        "app_id": names("app"),
        "kafka": {"bootstrap_servers": broker.address(listener), "security": security},
        "guarantee": "exactly_once",
        "state_dir": str(tmp_path / "state"),
        "topics": {names("in"): {"key_serde": "str"}, names("out"): {"key_serde": "str"}},
        "processors": [{"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [names("in")],
                        "outputs": [names("out")], "params": {"output": names("out")},
                        "stores": {"counts": {"key_serde": "str"}}}],
    })  # fmt: skip


async def _run_app(
    broker: LocalBroker, app: Path, names: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Input produced over PLAINTEXT, the app run over its secured listener until caught up, its output read."""
    plaintext = broker.bootstrap_servers
    await create_topic(plaintext, names("in"))
    await produce(plaintext, names("in"), [(f"k{n}".encode(), msgpack.packb({"n": n})) for n in range(RECORDS)])
    log = tmp_path / "app.log"
    for name, value in _environment(broker).items():
        monkeypatch.setenv(name, value)
    worker = spawn_worker(app, "--until-caught-up", log=log)
    assert await asyncio.to_thread(worker.wait, 120) == 0, log.read_text()
    output = await read_topic(plaintext, names("out"), "read_committed")
    assert sorted(msgpack.unpackb(record.value)["n"] for record in output) == list(range(RECORDS))
    assert len(await read_topic(plaintext, f"{names('app')}-counts-changelog", "read_committed")) == RECORDS
    assert not [secret for secret in _secrets(broker) if secret in log.read_text()]


@pytest.mark.parametrize("setup", SETUPS, ids=list(SETUPS))
async def test_an_app_runs_end_to_end_over_a_secured_listener(
    secured_kafka: LocalBroker, topic_name: TopicNamer, tmp_path: Path, setup: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener, security = SETUPS[setup]
    app = _app(secured_kafka, listener, security(secured_kafka), topic_name, tmp_path)
    await _run_app(secured_kafka, app, topic_name, tmp_path, monkeypatch)


async def test_an_app_runs_end_to_end_with_oauthbearer_tokens_from_an_oidc_endpoint(
    secured_kafka: LocalBroker, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with token_endpoint({"alice": CLIENT_SECRET}) as endpoint:
        oauth = {"token_endpoint": endpoint.url, "client_id": "alice", "client_secret": "${TEST_CLIENT_SECRET}",
                 "scope": "kafka"}  # fmt: skip
        security = {
            "protocol": "SASL_SSL",
            "tls": _tls(secured_kafka),
            "sasl": {"mechanism": "OAUTHBEARER", "oauth": oauth},
        }
        app = _app(secured_kafka, "SASL_SSL", security, topic_name, tmp_path)
        await _run_app(secured_kafka, app, topic_name, tmp_path, monkeypatch)
    assert endpoint.requests, "no token was fetched"
    assert all(request == {"grant_type": "client_credentials", "scope": "kafka"} for request in endpoint.requests)


def _command(broker: LocalBroker, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args], input=stdin, cwd=REPO, env=_environment(broker),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def test_commands_produce_and_consume_over_sasl_ssl(
    secured_kafka: LocalBroker, topic_name: TopicNamer, tmp_path: Path
) -> None:
    security = {"protocol": "SASL_SSL", "tls": _tls(secured_kafka), "sasl": _scram("SCRAM-SHA-512")}
    app = _app(secured_kafka, "SASL_SSL", security, topic_name, tmp_path)
    await create_topic(secured_kafka.bootstrap_servers, topic_name("in"))
    produced = _command(
        secured_kafka, "produce", topic_name("in"), "--app", str(app), stdin='{"key": "k1", "value": {"n": 7}}\n'
    )
    assert produced.returncode == 0, produced.stderr
    consumed = _command(secured_kafka, "consume", topic_name("in"), "--app", str(app), "--max-records", "1")
    assert consumed.returncode == 0, consumed.stderr
    line = json.loads(consumed.stdout.splitlines()[0])
    assert (line["key"], line["value"]) == ("k1", {"n": 7})
    outputs = produced.stdout + produced.stderr + consumed.stdout + consumed.stderr
    assert not [secret for secret in _secrets(secured_kafka) if secret in outputs]


FAULTS: dict[str, tuple[str, Security, str]] = {
    "unknown-ca": (
        "SSL",
        lambda broker: {"protocol": "SSL", "tls": {"ca_file": str(broker.security.certificates.other_ca_file)}},  # type: ignore[union-attr]
        "unknown CA",
    ),
    "wrong-hostname": ("WRONG_HOST", lambda broker: {"protocol": "SSL", "tls": _tls(broker)}, "hostname mismatch"),
    "expired-certificate": ("EXPIRED", lambda broker: {"protocol": "SSL", "tls": _tls(broker)}, "expired certificate"),
    "wrong-password": (
        "SASL_SSL",
        lambda broker: {
            "protocol": "SASL_SSL",
            "tls": _tls(broker),
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "alice", "password": "${TEST_WRONG_PASSWORD}"},
        },
        "bad credentials",
    ),
}


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
def test_a_refused_handshake_stops_the_app_at_once_naming_the_broker_and_the_cause(
    secured_kafka: LocalBroker, topic_name: TopicNamer, tmp_path: Path, fault: str
) -> None:
    listener, security, cause = FAULTS[fault]
    app = _app(secured_kafka, listener, security(secured_kafka), topic_name, tmp_path)
    wrong_password = "not-alices-password-93f1"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "runtime", str(app), "--until-caught-up"], cwd=REPO,
        env={**_environment(secured_kafka), "TEST_WRONG_PASSWORD": wrong_password},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"error: Kafka at {secured_kafka.address(listener)} refused"), errors[0]
    assert cause in errors[0], errors[0]
    assert "retrying" not in result.stderr and "cannot reach Kafka" not in result.stderr
    assert "unreachable" not in result.stderr and "Unable connect" not in result.stderr, result.stderr
    outputs = result.stdout + result.stderr
    assert not [secret for secret in [*_secrets(secured_kafka), wrong_password] if secret in outputs]
    assert elapsed < 10, f"took {elapsed:.1f}s: retried as if the broker were unreachable"
