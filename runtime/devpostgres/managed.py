"""The developer's long-lived local PostgreSQL: `python -m runtime dev-postgres start|stop|status`.

Its cluster and port are kept under the cache directory, so every later start reuses them, and the
examples find it (or start it) when DATABASE_URL names no other server.
"""

from __future__ import annotations

import json
from pathlib import Path

from runtime.devkafka.broker import port_is_free
from runtime.devkafka.jars import cache_root
from runtime.devpostgres.server import LocalPostgres, reachable_dir

DEFAULT_PORT = 5432


def home() -> Path:
    return reachable_dir(cache_root() / "dev-postgres")


def _server() -> LocalPostgres | None:
    """The managed server as it was last started, running or not; None if it never was."""
    state = home() / "state.json"
    if not state.exists():
        return None
    return LocalPostgres(home() / "data", int(json.loads(state.read_text())["port"]))


def running() -> LocalPostgres | None:
    server = _server()
    return server if server is not None and server.running() else None


def start(port: int | None = None) -> tuple[LocalPostgres, bool]:
    """Start the managed server unless it runs already; the flag says whether it was started now."""
    current = running()
    if current is not None:
        return current, False
    previous = _server()
    if port is None and previous is not None and port_is_free(previous.port):
        port = previous.port
    if port is None:
        port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else 0
    server = LocalPostgres(home() / "data", port)
    server.start()
    (home() / "state.json").write_text(json.dumps({"port": server.port}))
    return server, True


def stop() -> LocalPostgres | None:
    server = running()
    if server is not None:
        server.stop()
    return server
