"""A local OTLP/HTTP endpoint that accepts spans and drops them: the exporter's cost without a backend's."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")  # an empty ExportTraceServiceResponse
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


class OtlpSink:
    """`with OtlpSink() as sink:` serves http://127.0.0.1:<port> (`sink.endpoint`) until the block ends."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp sink", daemon=True)

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
