"""A local Jaeger v2 (in-memory storage, 127.0.0.1 only) for tests and benchmarks; see scripts/jaeger.sh."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "scripts" / "jaeger.sh"
CONFIG = Path(__file__).with_name("jaeger.yaml")
PORTS = ("JAEGER_OTLP_HTTP_PORT", "JAEGER_OTLP_GRPC_PORT", "JAEGER_QUERY_HTTP_PORT", "JAEGER_QUERY_GRPC_PORT")


def jaeger_binary() -> Path:
    """The cached binary, built first when it is not there yet."""
    built = subprocess.run([str(BUILD)], check=True, capture_output=True, text=True)
    return Path(built.stdout.strip().splitlines()[-1])


def jaeger_is_built() -> bool:
    return subprocess.run([str(BUILD), "--if-built"], capture_output=True, check=False).returncode == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class LocalJaeger:
    """Receives OTLP at `otlp_endpoint` (HTTP) and answers trace queries at `query_url`."""

    def __init__(self, log: Path):
        self._log = log
        self._ports = {name: _free_port() for name in PORTS}
        self._process: subprocess.Popen[bytes] | None = None
        self.otlp_endpoint = f"http://127.0.0.1:{self._ports['JAEGER_OTLP_HTTP_PORT']}"
        self.otlp_grpc_endpoint = f"127.0.0.1:{self._ports['JAEGER_OTLP_GRPC_PORT']}"
        self.query_url = f"http://127.0.0.1:{self._ports['JAEGER_QUERY_HTTP_PORT']}"

    def start(self, timeout: float = 60) -> None:
        binary = jaeger_binary()
        env = {**os.environ, **{name: str(port) for name, port in self._ports.items()}}
        with self._log.open("ab") as output:
            self._process = subprocess.Popen(
                [str(binary), "--config", f"file:{CONFIG}"], env=env, stdout=output, stderr=output,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while self._get("/api/services") is None:
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Jaeger did not start; see {self._log}")
            time.sleep(0.2)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def trace(self, trace_id: int) -> dict[str, Any] | None:
        """The trace as the query API gives it ({"spans": [...], "processes": {...}}), None until it is stored."""
        found = self._get(f"/api/traces/{trace_id:032x}")
        return found["data"][0] if found and found.get("data") else None

    def _get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(self.query_url + path, timeout=5) as response:
                return json.load(response)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
