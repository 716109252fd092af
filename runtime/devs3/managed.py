"""The developer's long-lived local object store: `python -m runtime dev-s3 start|stop|status`.

Its data, port and access key are kept under the cache directory, so a later start serves the same
buckets with the same key; the key's secret is in a file only its owner reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from runtime.devkafka.broker import free_port, port_is_free, process_alive, stop_process
from runtime.devs3.server import LocalS3
from stores.cache_dir import cache_root

DEFAULT_PORT = 9000


def home() -> Path:
    return cache_root() / "dev-s3"


def _recorded() -> tuple[LocalS3, int | None] | None:
    """The server as last started, and its process id; None if it never was."""
    state = home() / "state.json"
    if not state.exists():
        return None
    recorded = json.loads(state.read_text())
    secret = (home() / "secret").read_text().strip()
    server = LocalS3(home() / "data", int(recorded["port"]), recorded["access_key"], secret)
    return server, recorded.get("pid")


def running() -> LocalS3 | None:
    found = _recorded()
    if found is None:
        return None
    server, pid = found
    return server if pid is not None and process_alive(pid) and server.answers() else None


def start(port: int | None = None) -> tuple[LocalS3, bool]:
    """Start the managed server unless it runs already; the flag says whether it was started now."""
    current = running()
    if current is not None:
        return current, False
    found = _recorded()
    if port is None and found is not None and port_is_free(found[0].port):
        port = found[0].port
    if port is None:
        port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else free_port()
    server = found[0] if found is not None else LocalS3(home() / "data")
    server.port = port
    home().mkdir(parents=True, exist_ok=True)
    secret = home() / "secret"
    secret.touch(mode=0o600)
    secret.chmod(0o600)  # a file left by an older start keeps its mode otherwise
    secret.write_text(server.secret_key + "\n")
    server.start(detach=True)
    assert server.process is not None
    state = {"port": server.port, "access_key": server.access_key, "pid": server.process.pid}
    (home() / "state.json").write_text(json.dumps(state))
    return server, True


def stop() -> LocalS3 | None:
    found = _recorded()
    if found is None or found[1] is None or not process_alive(found[1]):
        return None
    stop_process(found[1], timeout=10.0)
    return found[0]


def exports(server: LocalS3) -> str:
    """Shell lines that point AWS clients, and an app's `s3://` snapshot location, at the server."""
    return "\n".join(f"export {name}={value}" for name, value in server.environment().items())
