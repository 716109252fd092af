"""The developer's long-lived local PostgreSQL: `python -m runtime dev-postgres start|stop|status`.

Its cluster and port are kept under the cache directory, so every later start reuses them, and the
examples find it (or start it) when DATABASE_URL names no other server. Started with TLS, it uses the
certificates of the secured local Kafka (`python -m runtime dev-kafka start --secured`): one throwaway CA
to trust for both.
"""

from __future__ import annotations

import json
from pathlib import Path

from runtime.devkafka import managed as dev_kafka
from runtime.devkafka.broker import port_is_free
from runtime.devkafka.certificates import make_certificates
from runtime.devpostgres.server import DevPostgresError, LocalPostgres, reachable_dir
from stores.cache_dir import cache_root

DEFAULT_PORT = 5432


def home() -> Path:
    return reachable_dir(cache_root() / "dev-postgres")


def _server() -> LocalPostgres | None:
    """The managed server as it was last started, running or not; None if it never was."""
    state = home() / "state.json"
    if not state.exists():
        return None
    recorded = json.loads(state.read_text())
    return _server_at(int(recorded["port"]), recorded.get("tls", False))


def _server_at(port: int, tls: bool) -> LocalPostgres:
    certificates = make_certificates(dev_kafka.certificates_dir()) if tls else None
    return LocalPostgres(home() / "data", port, certificates)


def running() -> LocalPostgres | None:
    server = _server()
    return server if server is not None and server.running() else None


def start(port: int | None = None, tls: bool | None = None) -> tuple[LocalPostgres, bool]:
    """Start the managed server unless it runs already; the flag says whether it was started now. `tls` None
    takes the running one as it is (else starts one without TLS); one running against a wish of True or
    False is an error, since handing it back would hide that."""
    current = running()
    if current is not None:
        if tls is not None and (current.certificates is not None) != tls:
            serves = "serves no TLS" if tls else "serves TLS"
            raise DevPostgresError(
                f"the local PostgreSQL at {current.url} {serves}: stop it first (python -m runtime dev-postgres stop)"
            )
        return current, False
    previous = _server()
    if port is None and previous is not None and port_is_free(previous.port):
        port = previous.port
    if port is None:
        port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else 0
    server = _server_at(port, bool(tls))
    server.start()
    (home() / "state.json").write_text(json.dumps({"port": server.port, "tls": bool(tls)}))
    return server, True


def stop() -> LocalPostgres | None:
    server = running()
    if server is not None:
        server.stop()
    return server
