"""A local OTLP/HTTP endpoint for traces: it answers every export, and keeps the requests when asked."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class _Server(ThreadingHTTPServer):
    keep = False
    requests: list[tuple[str, bytes]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keeps connections open, as collectors do

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.keep:
            self.server.requests.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")  # an empty ExportTraceServiceResponse
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


class OtlpReceiver:
    """`with OtlpReceiver() as receiver:` serves http://127.0.0.1:<port> (`receiver.endpoint`) until the
    block ends. With `keep`, the trace export requests it got are in `exports()`; without, they are
    dropped (benchmarks: the exporter's cost without a backend's)."""

    def __init__(self, keep: bool = False) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.keep = keep
        self._server.requests = []
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp receiver", daemon=True)

    def exports(self) -> list[ExportTraceServiceRequest]:
        return [
            ExportTraceServiceRequest.FromString(body) for path, body in self._server.requests if path == "/v1/traces"
        ]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
