"""The health endpoints over HTTP, served from a thread of their own so that they answer, with the
reason, while the event loop is blocked (as the Prometheus endpoint does)."""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runtime.health.probes import Answer, Probes

log = logging.getLogger(__name__)


class HealthServer:
    """`GET /live` and `GET /ready`: 200 or 503, with a short JSON body saying why."""

    def __init__(self, probes: Probes, host: str, port: int):
        self.probes = probes
        routes = {"/live": probes.live, "/ready": probes.ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                probe = routes.get(self.path.split("?", 1)[0])
                if probe is None:
                    self._answer(HTTPStatus.NOT_FOUND, {"error": f"no {self.path}: /live or /ready"})
                    return
                answer: Answer = probe()
                self._answer(HTTPStatus.OK if answer[0] else HTTPStatus.SERVICE_UNAVAILABLE, answer[1])

            def _answer(self, status: HTTPStatus, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: not logged
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health endpoints", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()
        log.info("health endpoints on port %d: /live, /ready", self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
