"""Which failures to connect to PostgreSQL stop the app, told in words with the server and no secret, and which
are waited out (a server that refuses the connection is proven against a real one in
tests/integration/test_postgres_tls.py)."""

from __future__ import annotations

import ssl
from pathlib import Path

import asyncpg
import pytest

from processors.sinks.postgres_connection import GONE, CannotConnect, connect, refusal, server_of

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("dsn", "server"),
    [
        ("postgresql://app:s3cret-pw@db.internal:6432/orders?sslmode=verify-full", "db.internal:6432"),
        ("postgres://app@db.internal/orders", "db.internal:5432"),
        ("postgresql://app:s3cret-pw@a:5433,b/orders", "a:5433,b:5432"),
        ("postgresql://[::1]:5433/orders", "[::1]:5433"),
        ("postgresql:///orders?host=/run/postgresql", "/run/postgresql:5432"),
    ],
)
def test_the_server_is_named_by_host_and_port_without_credentials(dsn: str, server: str) -> None:
    assert server_of(dsn) == server


def _verification_failure(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    error.verify_code, error.verify_message = code, message
    return error


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (_verification_failure(20, "unable to get local issuer certificate"), "unknown CA: the DSN's sslrootcert"),
        (_verification_failure(62, "Hostname mismatch, certificate is not valid for 'db'"), "hostname mismatch"),
        (_verification_failure(10, "certificate has expired"), "expired certificate"),
        (ConnectionError('PostgreSQL server at "db:5432" rejected SSL upgrade'), "the server does not serve TLS"),
        (asyncpg.InvalidPasswordError('password authentication failed for user "app"'), "bad credentials"),
        (asyncpg.InvalidAuthorizationSpecificationError('role "app" does not exist'), "login refused"),
        (asyncpg.InvalidCatalogNameError('database "orders" does not exist'), "check the DSN's database"),
    ],
)
def test_a_refused_connection_is_told_in_words(error: Exception, cause: str) -> None:
    told = refusal(error)
    assert told is not None and cause in told


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connect call failed"),
        TimeoutError(),
        ssl.SSLEOFError(8, "EOF occurred"),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
)
def test_a_server_out_of_reach_is_no_refusal_and_is_waited_out(error: Exception) -> None:
    assert refusal(error) is None
    assert isinstance(error, GONE)


async def test_a_file_the_dsn_names_that_is_missing_is_named_before_connecting(tmp_path: Path) -> None:
    missing = tmp_path / "ca.pem"
    dsn = f"postgresql://app:s3cret-pw@127.0.0.1:1/orders?sslmode=verify-full&sslrootcert={missing}"
    with pytest.raises(CannotConnect) as raised:
        await connect(dsn)
    assert str(raised.value) == (
        f"PostgreSQL at 127.0.0.1:1: the DSN's sslrootcert names {missing}, which is not a readable file"
    )


async def test_a_dsn_asyncpg_cannot_use_is_no_server_out_of_reach() -> None:
    with pytest.raises(CannotConnect, match=r"^PostgreSQL at 127.0.0.1:1: the DSN cannot be used: .*sslmode"):
        await connect("postgresql://app@127.0.0.1:1/orders?sslmode=always")
