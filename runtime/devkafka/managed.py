"""The developer's long-lived local broker: `python -m runtime dev-kafka start|stop|status`.

Its pid and address are kept in a state file, so apps whose YAML names no bootstrap servers
find it (or start it) and every later run reuses it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from runtime.devkafka.broker import LocalBroker, cluster_ready, port_is_free, process_alive, stop_process
from runtime.devkafka.jars import cache_root

DEFAULT_PORT = 9092


@dataclass(frozen=True)
class RunningBroker:
    pid: int
    bootstrap_servers: str
    data_dir: str


def state_dir() -> Path:
    return cache_root() / "dev-kafka"


def state_file() -> Path:
    return state_dir() / "state.json"


def running() -> RunningBroker | None:
    """The managed broker if its process is alive and it answers, else None."""
    path = state_file()
    if not path.exists():
        return None
    state = RunningBroker(**json.loads(path.read_text()))
    if process_alive(state.pid) and cluster_ready(state.bootstrap_servers):
        return state
    return None


def start(port: int | None = None) -> tuple[RunningBroker, bool]:
    """Start the managed broker unless it runs already; the flag says whether it was started now."""
    current = running()
    if current is not None:
        return current, False
    chosen = port if port is not None else (DEFAULT_PORT if port_is_free(DEFAULT_PORT) else 0)
    broker = LocalBroker(data_dir=state_dir() / "data", port=chosen)
    # The controller port must stay the same across restarts of the same data dir.
    controller_port_file = state_dir() / "controller.port"
    if controller_port_file.exists() and port_is_free(int(controller_port_file.read_text())):
        broker.controller_port = int(controller_port_file.read_text())
    state_dir().mkdir(parents=True, exist_ok=True)
    controller_port_file.write_text(str(broker.controller_port))
    broker.start(detach=True)
    assert broker.process is not None
    state = RunningBroker(broker.process.pid, broker.bootstrap_servers, str(broker.data_dir))
    state_file().write_text(json.dumps(state.__dict__))
    return state, True


def stop() -> RunningBroker | None:
    path = state_file()
    if not path.exists():
        return None
    state = RunningBroker(**json.loads(path.read_text()))
    if process_alive(state.pid):
        stop_process(state.pid, timeout=30.0)
    os.unlink(path)
    return state
