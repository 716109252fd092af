"""Connecting to PostgreSQL, and which failures are worth waiting out.

A database out of reach (stopped, restarting, the network down) comes back: its callers retry. One that
answers but refuses the connection's TLS or login, or a DSN naming what does not exist, stays so until the
DSN or the server changes: `connect` raises `CannotConnect`, one line naming the server and the cause in
words, without the DSN's credentials. asyncpg takes `sslmode`, `sslrootcert`, `sslcert`, `sslkey` and
`sslpassword` from the DSN's query string as libpq does.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg

from processors.errors import StopWorker

CONNECT_TIMEOUT_S = 10
DEFAULT_PORT = 5432
# What a database that went away (stopped, restarted, out of reach) raises, or a connection it left broken
# (asyncpg's InternalClientError: an operation cut off); anything else is the caller's own fault.
GONE = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InternalClientError,
)
# A TLS connection cut off mid-handshake, as by a server going away: not a refusal.
CUT_OFF = (ssl.SSLEOFError, ssl.SSLZeroReturnError)
# Files a DSN may name (libpq's parameters); one missing is a mistake in the DSN.
FILE_PARAMETERS = ("sslrootcert", "sslcert", "sslkey", "sslcrl")
UNKNOWN_CA = "unknown CA: the DSN's sslrootcert does not hold the CA that signed the server's certificate"
# The server certificate's faults, by OpenSSL's verify code (X509_V_ERR_*): what to do about each.
CERTIFICATE_HINTS: dict[int, str] = {
    2: UNKNOWN_CA,
    19: UNKNOWN_CA,
    20: UNKNOWN_CA,
    18: "unknown CA: the server's certificate is self-signed; name it in the DSN's sslrootcert",
    9: "certificate not yet valid: check this machine's clock",
    10: "expired certificate: the server must be given a new one (or this machine's clock is wrong)",
    62: "hostname mismatch: the server's certificate does not hold the DSN's host; connect by a name it holds",
    64: "hostname mismatch: the server's certificate does not hold the DSN's IP address; connect by a name it holds",
}


class CannotConnect(StopWorker):
    """The server refused the connection's TLS or login, or the DSN names what does not exist: no retry can
    succeed until the DSN or the server changes."""

    def __init__(self, server: str, cause: str):
        super().__init__(f"PostgreSQL at {server}: {cause}")


async def connect(dsn: str) -> asyncpg.Connection:
    """A connection; `CannotConnect` when retrying cannot help, what `GONE` holds when it may."""
    _check_files(dsn)
    try:
        return await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_S)
    except Exception as error:
        cause = refusal(error)
        if cause is None:
            raise
        raise CannotConnect(server_of(dsn), cause) from None


def refusal(error: Exception) -> str | None:
    """What a failed connection attempt says, in words, when retrying cannot help; None when it may."""
    if isinstance(error, ssl.SSLCertVerificationError):
        hint = CERTIFICATE_HINTS.get(error.verify_code, "check the DSN's sslmode and sslrootcert")
        return f"the server's certificate failed verification ({error.verify_message}): {hint}"
    if isinstance(error, ssl.SSLError) and not isinstance(error, CUT_OFF):
        return f"TLS failed ({error.reason or error}): check the DSN's sslmode, sslcert, sslkey and sslpassword"
    if type(error) is ConnectionError and "rejected SSL upgrade" in str(error):  # asyncpg's only sign of it
        return "the server does not serve TLS, and the DSN's sslmode (require, verify-ca, verify-full) asks for it"
    if isinstance(error, asyncpg.InvalidPasswordError):
        return f"bad credentials ({error}): check the DSN's user and password"
    if isinstance(error, asyncpg.InvalidAuthorizationSpecificationError):
        return f"login refused ({error}): check the DSN's user, and its sslmode against the server's pg_hba.conf"
    if isinstance(error, asyncpg.InvalidCatalogNameError):
        return f"{error}: check the DSN's database"
    if isinstance(error, asyncpg.ClientConfigurationError):
        return f"the DSN cannot be used: {error}"
    return None


def server_of(dsn: str) -> str:
    """The DSN's host:port (each of a list), without its credentials."""
    parts = urlsplit(dsn)
    hosts = parts.netloc.rpartition("@")[2] or ",".join(parse_qs(parts.query).get("host", [])) or "localhost"
    return ",".join(host if re.search(r":\d+$", host) else f"{host}:{DEFAULT_PORT}" for host in hosts.split(","))


def _check_files(dsn: str) -> None:
    """A file the DSN names that cannot be read is named, rather than an OSError taken for the server gone."""
    for name, values in parse_qs(urlsplit(dsn).query).items():
        if name in FILE_PARAMETERS:
            path = Path(values[-1]).expanduser()
            if not path.is_file() or not os.access(path, os.R_OK):
                raise CannotConnect(server_of(dsn), f"the DSN's {name} names {path}, which is not a readable file")
