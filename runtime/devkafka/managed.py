"""The developer's long-lived local broker: `python -m runtime dev-kafka start|stop|status`.

Its pids and addresses are kept in a state file, so apps whose YAML names no bootstrap servers
find it (or start it) and every later run reuses it. There is one at a time: an app that names no
broker takes "the" local one, which two would make ambiguous.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runtime.devkafka.broker import LocalBroker, cluster_ready, port_is_free, process_alive, stop_process
from runtime.devkafka.certificates import make_certificates
from runtime.devkafka.cluster import LocalCluster
from runtime.devkafka.jars import DevKafkaError
from runtime.devkafka.secured import ADMIN, CLIENT_LISTENERS, Security
from stores.cache_dir import cache_root

DEFAULT_PORT = 9092


@dataclass(frozen=True)
class RunningBroker:
    """What a later command needs of the running broker or cluster: its processes and where it listens."""

    pid: int
    bootstrap_servers: str
    data_dir: str
    other_pids: list[int] = field(default_factory=list)
    secured: dict[str, str] = field(default_factory=dict)

    @property
    def pids(self) -> list[int]:
        return [self.pid, *self.other_pids]

    @property
    def port(self) -> int:
        return int(self.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])


def state_dir() -> Path:
    return cache_root() / "dev-kafka"


def state_file() -> Path:
    return state_dir() / "state.json"


def users_file() -> Path:
    """The secured broker's users and their passwords, readable by its owner only."""
    return state_dir() / "users.json"


def certificates_dir() -> Path:
    return state_dir() / "certificates"


def _recorded() -> RunningBroker | None:
    path = state_file()
    return RunningBroker(**json.loads(path.read_text())) if path.exists() else None


def running() -> RunningBroker | None:
    """The managed broker if its processes are alive and it answers, else None."""
    state = _recorded()
    if state is not None and all(process_alive(pid) for pid in state.pids) and cluster_ready(state.bootstrap_servers):
        return state
    return None


def _refuse_another(current: RunningBroker, port: int | None, brokers: int, secured: bool) -> None:
    """A request for a broker unlike the running one fails: returning the other one would hide it."""
    wanted = []
    if port is not None and port != current.port:
        wanted.append(f"on port {port}")
    if brokers != len(current.pids):
        wanted.append(f"with {brokers} brokers")
    if secured and not current.secured:
        wanted.append("with secured listeners")
    if wanted:
        raise DevKafkaError(
            f"a local Kafka already runs at {current.bootstrap_servers} (pid {current.pid}); stop it with "
            f"`python -m runtime dev-kafka stop` to start one {' and '.join(wanted)}"
        )


def _security() -> Security:
    """The secured cluster's certificates and users, made once and kept for its restarts."""
    path = users_file()
    if not path.exists():
        state_dir().mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({ADMIN: secrets.token_hex(12), "client": secrets.token_hex(12)}))
        path.chmod(0o600)
    return Security(make_certificates(certificates_dir()), json.loads(path.read_text()))


def start(port: int | None = None, brokers: int = 1, secured: bool = False) -> tuple[RunningBroker, bool]:
    """Start the managed broker unless it runs already; the flag says whether it was started now."""
    current = running()
    if current is not None:
        _refuse_another(current, port, brokers, secured)
        return current, False
    security = _security() if secured else None
    if brokers == 1 and not secured:
        return _start_single(port), True
    if port is not None:
        raise DevKafkaError(
            "--port is for a single plain broker; a cluster's or a secured broker's ports are free ones"
        )
    data = state_dir() / f"cluster-{brokers}{'-secured' if secured else ''}"
    shutil.rmtree(data, ignore_errors=True)  # its ports are new each start, and the quorum's are in its metadata
    cluster = LocalCluster(data, size=brokers, security=security)
    cluster.start(detach=True)
    pids = [node.process.pid for node in cluster.nodes if node.process is not None]
    listeners = {name: cluster.address(name) for name in CLIENT_LISTENERS} if secured else {}
    state = RunningBroker(pids[0], cluster.bootstrap_servers, str(data), pids[1:], listeners)
    state_file().write_text(json.dumps(asdict(state)))
    return state, True


def _start_single(port: int | None) -> RunningBroker:
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
    state_file().write_text(json.dumps(asdict(state)))
    return state


def stop() -> RunningBroker | None:
    state = _recorded()
    if state is None:
        return None
    for pid in state.pids:
        if process_alive(pid):
            os.kill(pid, signal.SIGTERM)  # all at once: one by one, the last waits for a lost quorum
    for pid in state.pids:
        stop_process(pid, timeout=30.0)
    os.unlink(state_file())
    return state
