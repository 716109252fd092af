"""PostgreSQL over TLS: a sink writes its rows over `sslmode=verify-full`, every connection of it encrypted, to
a server that takes no other; a server whose certificate or login the app cannot accept stops the app at once,
exit 1, with one line naming the server and the cause, and no secret in any output."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from processors.sinks.postgres_connection import CannotConnect, connect
from runtime.devkafka.certificates import Certificates, ServerCertificate
from runtime.devpostgres.server import LocalPostgres, throwaway
from runtime.testkit import AppDriver
from tests.conftest import TopicNamer
from tests.integration.test_postgres_sink import payments, query, sink_app
from tests.support.running import REPO, write_app

CLERK_PASSWORD = "clerk-password-7c1e9a"
WRONG_PASSWORD = "not-the-clerks-password-42b0"


@pytest.fixture(scope="module")
def tls_postgres(certificates: Certificates) -> Iterator[LocalPostgres]:
    """A server of this module, TLS only, with the session CA's certificate for 127.0.0.1; `runtime` is trusted
    over TLS, `clerk` logs in by its password."""
    with throwaway(certificates) as server:
        query(server.url, f"CREATE ROLE clerk LOGIN PASSWORD '{CLERK_PASSWORD}'")
        query(server.url, "CREATE TABLE outbox (id bigserial PRIMARY KEY, key text, value jsonb, "
                          "created_at timestamptz NOT NULL DEFAULT now())")  # fmt: skip
        yield server


def _with_options(url: str, **options: str) -> str:
    """`url` with its query string replaced by `options`."""
    return f"{url.partition('?')[0]}?{'&'.join(f'{name}={value}' for name, value in options.items())}"


def test_a_sink_writes_its_rows_over_tls_verified_against_the_ca(tls_postgres: LocalPostgres, tmp_path: Path) -> None:
    url = tls_postgres.url
    assert "sslmode=verify-full&sslrootcert=" in url
    table = f"payments_{uuid.uuid4().hex[:8]}"
    query(url, f"CREATE TABLE {table} (id text, account text, amount bigint, seen timestamptz)")
    with AppDriver(sink_app(url, table), state_dir=tmp_path / "state") as driver:
        driver.pipe_all("payments", payments(30))
        # While its tasks hold their connections, the server tells which of its clients speak TLS.
        clients = query(url, "SELECT a.pid = pg_backend_pid() AS mine, s.ssl FROM pg_stat_activity a "
                             "JOIN pg_stat_ssl s USING (pid) WHERE a.backend_type = 'client backend'")  # fmt: skip
    sinks = [client["ssl"] for client in clients if not client["mine"]]
    assert sinks and all(sinks), clients
    rows = query(url, f"SELECT count(*) AS rows, sum(amount) AS total FROM {table}")
    assert (rows[0]["rows"], rows[0]["total"]) == (30, sum(range(30)))
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
        query(_with_options(url, sslmode="disable"), "SELECT 1")


def _outbox_app(name: TopicNamer, dsn: str, tmp_path: Path) -> dict[str, Any]:
    topic = name("orders")
    return {"app_id": name("app"), "topics": {topic: {"key_serde": "str", "value_serde": "json"}},
            "outboxes": {"orders": {"dsn": dsn, "table": "outbox", "topic": topic, "settle_ms": 0}},
            "processors": [{"name": "p", "class": "processors:Processor", "inputs": [topic]}],
            "state_dir": str(tmp_path / "state")}  # fmt: skip


def _sink_app(name: TopicNamer, dsn: str, tmp_path: Path) -> dict[str, Any]:
    app = sink_app(dsn, "no_table_needed")  # the connection is refused before the table is looked for
    topic = name("payments")
    app["processors"][0]["inputs"] = [topic]
    app.update(
        {"app_id": name("app"), "topics": {topic: app["topics"]["payments"]}, "state_dir": str(tmp_path / "state")}
    )
    return app


def _unknown_ca(server: LocalPostgres, plain_url: str) -> str:
    assert server.certificates is not None
    return _with_options(server.url, sslmode="verify-full", sslrootcert=str(server.certificates.other_ca_file))


def _wrong_password(server: LocalPostgres, plain_url: str) -> str:
    return server.url.replace("//runtime@", f"//clerk:{WRONG_PASSWORD}@")


def _tls_from_a_server_without(server: LocalPostgres, plain_url: str) -> str:
    return _with_options(plain_url, sslmode="require")


FAULTS = {
    "unknown-ca": (_sink_app, _unknown_ca, "processor 'sink' stopped in init()", "unknown CA"),
    "bad-credentials": (_outbox_app, _wrong_password, "outboxes.orders", "bad credentials"),
    "server-without-tls": (_sink_app, _tls_from_a_server_without, "processor 'sink'", "does not serve TLS"),
}


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
def test_a_refused_connection_stops_the_app_at_once_naming_the_server_and_the_cause(
    tls_postgres: LocalPostgres, postgres_url: str, kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path,
    fault: str,
) -> None:  # fmt: skip
    """`postgres_url` is the session's server, without TLS."""
    make_app, dsn_for, who, cause = FAULTS[fault]
    dsn = dsn_for(tls_postgres, postgres_url)
    app = {**make_app(topic_name, dsn, tmp_path), "kafka": {"bootstrap_servers": kafka_bootstrap}}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "runtime", str(write_app(tmp_path, app))], cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    server = dsn.partition("@")[2].partition("/")[0]
    assert errors[0].startswith(f"error: {who}"), errors[0]
    assert f"PostgreSQL at {server}: " in errors[0] and cause in errors[0], errors[0]
    assert "Traceback" not in result.stderr and "out of reach" not in result.stderr, result.stderr
    outputs = result.stdout + result.stderr
    assert WRONG_PASSWORD not in outputs and CLERK_PASSWORD not in outputs
    assert elapsed < 30, f"took {elapsed:.1f}s: retried as if the server were out of reach"


@pytest.mark.parametrize(
    ("certificate", "cause"),
    [("wrong-host", "hostname mismatch"), ("expired", "expired certificate")],
)
def test_a_server_certificate_for_another_host_or_expired_is_refused(
    tls_postgres: LocalPostgres, certificate: ServerCertificate, cause: str
) -> None:
    assert tls_postgres.certificates is not None
    tls_postgres.serve_certificate(tls_postgres.certificates.pem(certificate))
    try:
        refused = asyncio.run(_refused_once_reloaded(tls_postgres.url))
    finally:
        tls_postgres.serve_certificate(tls_postgres.certificates.pem("broker"))
        asyncio.run(_refused_once_reloaded(tls_postgres.url, until_accepted=True))
    assert str(refused).startswith(f"PostgreSQL at 127.0.0.1:{tls_postgres.port}: the server's certificate failed")
    assert cause in str(refused), str(refused)


async def _refused_once_reloaded(url: str, until_accepted: bool = False) -> CannotConnect | None:
    """The refusal of the first connection after the server's reload took effect (or None, the first one
    accepted): a reload lands a moment after it is asked for."""
    deadline = time.monotonic() + 10
    while True:
        try:
            connection = await connect(url)
        except CannotConnect as refusal:
            if not until_accepted:
                return refusal
        else:
            await connection.close()
            if until_accepted:
                return None
        assert time.monotonic() < deadline, "the server's reload did not take effect"
        await asyncio.sleep(0.05)
