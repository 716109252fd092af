"""An HTTP proxy in front of the test's schema registry that asks for basic authentication, as a registry
deployed behind one does, and counts the requests that reach the registry by path."""

from __future__ import annotations

import base64
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def authenticating_proxy(upstream: str, username: str, password: str) -> Iterator[tuple[str, Counter[str]]]:
    """Yields the proxy's URL (the same path as `upstream`'s) and the count of requests passed on, by path."""
    expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
    passed: Counter[str] = Counter()
    scheme_host, _, base_path = upstream.partition("//")[2].partition("/")

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            if self.headers.get("Authorization") != expected:
                self._answer(401, b'{"error_code": 401, "message": "Unauthorized"}')
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
            passed[self.path] += 1
            headers = {name: self.headers[name] for name in ("Content-Type", "Accept") if self.headers.get(name)}
            request = urllib.request.Request(f"http://{scheme_host}{self.path}", data=body, headers=headers,
                                             method=self.command)  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    self._answer(response.status, response.read())
            except urllib.error.HTTPError as error:
                self._answer(error.code, error.read())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _forward  # noqa: N815 (the names http.server calls)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="registry proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{base_path}", passed
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
