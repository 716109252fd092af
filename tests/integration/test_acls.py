"""On a broker whose authorizer allows only what an ACL grants, an app runs end to end with exactly the ACLs
`python -m runtime acls` prints, applied by running the printed kafka-acls.sh commands; and each permission
taken away stops it with exit 1 and one line naming the operation and the resource, without a traceback.

The test's own clients use the broker's PLAINTEXT listener as a super user; the app is given the
SASL_PLAINTEXT listener as a user with no permission but what the ACLs grant.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest

from runtime.devkafka import LocalBroker
from runtime.devkafka.certificates import Certificates
from runtime.devkafka.secured import ADMIN, Security
from tests.support.acls import admin_config, run_acl_commands
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import REPO, write_app

USER = "app"
RECORDS = 6


@dataclass(frozen=True)
class AclsRequired(Security):
    """The secured listeners, on which a principal may do only what an ACL allows (as on a production cluster)."""

    def settings(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {
            **super().settings(ports),
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN};User:ANONYMOUS",  # ANONYMOUS: the test's PLAINTEXT clients
        }


@dataclass(frozen=True)
class GrantedApp:
    broker: LocalBroker
    yaml: Path
    app_id: str
    printed: str
    admin_config: Path
    environment: dict[str, str]

    def topic(self, name: str) -> str:
        return f"{self.app_id}-{name}"

    def acl(self, action: str, *arguments: str) -> None:
        """One kafka-acls.sh command, as the admin."""
        line = f"kafka-acls.sh --bootstrap-server {self.broker.address('SASL_PLAINTEXT')} {action} --force "
        run_acl_commands(line + f"--allow-principal User:{USER} " + " ".join(arguments), self.admin_config)

    def runtime(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "runtime", *arguments], cwd=REPO, env=self.environment,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def acl_kafka(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates) -> Iterator[LocalBroker]:
    users = {ADMIN: secrets.token_hex(12), USER: secrets.token_hex(12)}
    with LocalBroker(
        data_dir=tmp_path_factory.mktemp("acl-kafka"), security=AclsRequired(certificates, users)
    ) as broker:
        yield broker


@pytest.fixture(scope="module")
def granted_app(acl_kafka: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> GrantedApp:
    """An exactly-once app with a store, a repartition, a table, a broadcast input, a global store and dead
    letters, and the ACLs `acls` prints for it applied."""
    assert acl_kafka.security is not None
    directory = tmp_path_factory.mktemp("acl-app")
    app_id = f"acls-{uuid.uuid4().hex[:8]}"
    yaml = write_app(directory, _app(acl_kafka, app_id, directory))
    environment = {**os.environ, "PYTHONPATH": str(REPO), "TEST_KAFKA_PASSWORD": acl_kafka.security.users[USER]}
    printed = subprocess.run(
        [sys.executable, "-m", "runtime", "acls", str(yaml)], cwd=REPO, env=environment,
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    config = admin_config(directory, ADMIN, acl_kafka.security.admin_password)
    run_acl_commands(printed, config)
    return GrantedApp(acl_kafka, yaml, app_id, printed, config, environment)


def _app(broker: LocalBroker, app_id: str, directory: Path) -> dict[str, object]:
    def topic(name: str) -> str:
        return f"{app_id}-{name}"

    return {
        "app_id": app_id,
        "kafka": {
            "bootstrap_servers": broker.address("SASL_PLAINTEXT"),
            "security": {
                "protocol": "SASL_PLAINTEXT",
                "sasl": {"mechanism": "SCRAM-SHA-512", "username": USER, "password": "${TEST_KAFKA_PASSWORD}"},
            },
        },
        "guarantee": "exactly_once",
        "state_dir": str(directory / "state"),
        "errors": {"processing": "dead_letter"},
        "topics": {
            topic("in"): {"key_serde": "str"},
            topic("out"): {"key_serde": "str"},
            topic("echoed"): {"key_serde": "str"},
            topic("rates"): {"key_serde": "str"},
            topic("table"): {"key_serde": "str", "cleanup_policy": "compact"},
            topic("reference"): {"key_serde": "str"},
        },
        "global_stores": {"reference": {"topic": topic("reference"), "key_serde": "str", "backend": "memory"}},
        "processors": [
            {"name": "count", "class": "tests.support.apps:CountPerKey", "inputs": [topic("in")],
             "outputs": [topic("out")], "params": {"output": topic("out")}, "repartition": {"key": "n"},
             "tables": {"table": {"topic": topic("table")}}, "stores": {"counts": {"key_serde": "msgpack"}}},
            {"name": "echo", "class": "tests.support.apps:Echo", "inputs": [topic("in")],
             "broadcast": [topic("rates")], "outputs": [topic("echoed")], "params": {"output": topic("echoed")}},
        ],
    }  # fmt: skip


def _produce(app: GrantedApp, start: int) -> None:
    """Records for the app's input, which the app creates on its first run if the test has not."""
    asyncio.run(create_topic(app.broker.bootstrap_servers, app.topic("in")))  # an existing one stays as it is
    records = [(f"k{n}".encode(), msgpack.packb({"n": n})) for n in range(start, start + RECORDS)]
    asyncio.run(produce(app.broker.bootstrap_servers, app.topic("in"), records))


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_the_app_runs_end_to_end_with_exactly_the_acls_acls_prints(granted_app: GrantedApp) -> None:
    app, plaintext = granted_app, granted_app.broker.bootstrap_servers
    assert "--transactional-id" in app.printed and "--resource-pattern-type prefixed" in app.printed
    assert "\n# kafka-acls.sh" in app.printed and "IdempotentWrite --cluster" in app.printed  # not applied
    for name in ("table", "rates", "reference"):  # created by the test: the app only reads them
        asyncio.run(create_topic(plaintext, app.topic(name), configs={"cleanup.policy": "compact"}))
        asyncio.run(produce(plaintext, app.topic(name), [(b"k1", msgpack.packb({"n": 1}))]))
    _produce(app, 0)
    asyncio.run(produce(plaintext, app.topic("in"), [(b"bad", msgpack.packb({"no-n": 1}))]))

    result = app.runtime(str(app.yaml), "--until-caught-up")

    assert result.returncode == 0, result.stderr
    assert "authoriz" not in result.stderr.lower(), result.stderr  # not even a topic configuration refused
    counted = asyncio.run(read_topic(plaintext, app.topic("out")))
    assert sorted(msgpack.unpackb(record.value)["n"] for record in counted) == list(range(RECORDS))
    echoed = asyncio.run(read_topic(plaintext, app.topic("echoed")))
    assert len(echoed) == RECORDS + 2  # the bad record too, and the broadcast input's record
    assert len(asyncio.run(read_topic(plaintext, app.topic("dead-letters")))) == 1


MISSING = {
    "read": (("--operation", "Read", "--topic", "{app}-in"), "Read on topic '{app}-in'"),
    "write": (("--operation", "Write", "--topic", "{app}-out"), "Write on topic '{app}-out'"),
    "group": (("--operation", "Read", "--group", "{app}"), "Read on group '{app}'"),
    "transactional-id": (
        ("--operation", "Write", "--transactional-id", "{app}-", "--resource-pattern-type", "prefixed"),
        "Write on transactional-id '{app}-[a-z0-9-]+'",
    ),
}


@pytest.mark.parametrize("missing", MISSING, ids=list(MISSING))
def test_a_permission_taken_away_stops_the_app_with_one_line_naming_it(granted_app: GrantedApp, missing: str) -> None:
    app = granted_app
    resource, refused = MISSING[missing]
    acl = [word.format(app=app.app_id) for word in resource]
    app.acl("--remove", *acl)
    try:
        _produce(app, 100)
        result = app.runtime(str(app.yaml), "--until-caught-up")
        commands = [app.runtime("consume", app.topic("in"), "--app", str(app.yaml))] if missing == "read" else []
    finally:
        app.acl("--add", *acl)
    for ran in (result, *commands):
        assert ran.returncode == 1, ran.stderr
        errors = _error_lines(ran.stderr)
        assert len(errors) == 1, ran.stderr
        expected = (
            f"error: Kafka at {re.escape(app.broker.address('SASL_PLAINTEXT'))} refused User:{USER} "
            f"{refused.format(app=app.app_id)}: grant it "
            rf"\(python -m runtime acls app.yaml lists every ACL the app needs\)"
        )
        assert re.fullmatch(expected, errors[0]), errors[0]
        assert "Traceback" not in ran.stderr, ran.stderr
        assert "retrying" not in ran.stderr, ran.stderr
