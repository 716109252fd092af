"""The health endpoints over HTTP, served from a thread of their own so that they answer, with the
reason, while the event loop is blocked (as the Prometheus endpoint does)."""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runtime.health.probes import Answer, Probes
from runtime.health.queries import FORWARDED, QueryEndpoint, QueryRequest, Reply

STORES = "/stores/"

log = logging.getLogger(__name__)


class Listener(ThreadingHTTPServer):
    """A thread per request, and a listen backlog for a burst of queries: while the event loop holds the GIL,
    connections wait to be accepted, and past the default backlog of 5 the kernel drops them, each then
    retried by its client a second later."""

    daemon_threads = True
    request_queue_size = 128


class HealthServer:
    """`GET /live` and `GET /ready`: 200 or 503, with a short JSON body saying why; with `queries`, the
    store queries under `/stores/` too."""

    def __init__(self, probes: Probes, host: str, port: int, queries: QueryEndpoint | None = None):
        self.probes = probes
        routes = {"/live": probes.live, "/ready": probes.ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if queries is not None and path.startswith(STORES):
                    reply = self._query(queries, path, query)
                    self._answer(reply.status, reply.body)
                    return
                probe = routes.get(path)
                if probe is None:
                    known = "/live, /ready or /stores/" if queries is not None else "/live or /ready"
                    self._answer(HTTPStatus.NOT_FOUND, {"error": f"no {path}: {known}"})
                    return
                answer: Answer = probe()
                self._answer(HTTPStatus.OK if answer[0] else HTTPStatus.SERVICE_UNAVAILABLE, answer[1])

            def _query(self, endpoint: QueryEndpoint, path: str, query: str) -> Reply:
                authorization = self.headers.get("Authorization")
                refusal = endpoint.refusal(self.connection.getsockname()[0], authorization)
                if refusal is not None:
                    return refusal
                forwarded = self.headers.get(FORWARDED) is not None
                fields = urllib.parse.parse_qs(query, keep_blank_values=True)  # ?prefix= reads every key
                request = QueryRequest(path, fields, forwarded, authorization)
                try:
                    return endpoint.answers.answer(request)
                except Exception as error:  # the server's thread goes on answering; the worker is not stopped
                    log.exception("store query %s failed", path)
                    return Reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"the query failed: {error!r}"})

            def _answer(self, status: HTTPStatus, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: not logged
                pass

        self._also = ", /stores/" if queries is not None else ""
        self._server = Listener((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="health endpoints", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()
        log.info("health endpoints on port %d: /live, /ready%s", self.port, self._also)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
