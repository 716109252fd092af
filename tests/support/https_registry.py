"""A stand-in for a schema registry over HTTPS, serving one certificate (expired, for another host, or good)
and, when asked to, requiring a client certificate: it answers every subject's latest schema, and records the
Authorization header of each request, so a test sees what a client sent and how it fails a certificate."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LATEST = {"id": 7, "version": 1, "schema": '"string"', "schemaType": "AVRO"}
REFUSED_WITH = {"Bearer unknown": 401, "Bearer not-granted": 403}
"""Authorization headers answered with a refusal, as a registry answers credentials it does not accept."""


@dataclass
class HttpsRegistry:
    url: str = ""
    authorizations: list[str | None] = field(default_factory=list)


@contextmanager
def https_registry(cert_file: Path, key_file: Path, client_ca: Path | None = None) -> Iterator[HttpsRegistry]:
    """`client_ca`: clients must present a certificate that CA signed (mutual TLS)."""
    registry = HttpsRegistry()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            authorization = self.headers.get("Authorization")
            registry.authorizations.append(authorization)
            status = REFUSED_WITH.get(authorization or "", 200)
            body = json.dumps(LATEST if status == 200 else {"error_code": status, "message": "refused"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests read `authorizations`."""

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert_file), str(key_file))
    if client_ca is not None:
        context.load_verify_locations(str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    registry.url = f"https://127.0.0.1:{server.server_address[1]}/apis/ccompat/v7"
    thread = threading.Thread(target=server.serve_forever, name="https registry", daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
