"""A local OIDC token endpoint: the client credentials grant, answered with Kafka's unsecured JWS tokens
(`alg: none`), which the secured local broker accepts for OAUTHBEARER, or with tokens of another issuer
(a test's schema registry verifies signed ones)."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol


def _part(claims: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()


class Issuer(Protocol):
    def token(self, subject: str, lifetime_s: int) -> str: ...


class UnsecuredTokens:
    def token(self, subject: str, lifetime_s: int) -> str:
        now = int(time.time())
        return f"{_part({'alg': 'none'})}.{_part({'sub': subject, 'iat': now, 'exp': now + lifetime_s})}."


@dataclass
class TokenEndpoint:
    """Its clients (id to secret), and the requests it has answered, for the tests to count."""

    clients: dict[str, str]
    lifetime_s: int = 3600
    url: str = ""
    requests: list[dict[str, str]] = field(default_factory=list)


@contextmanager
def token_endpoint(
    clients: dict[str, str], lifetime_s: int = 3600, issuer: Issuer | None = None
) -> Iterator[TokenEndpoint]:
    tokens = issuer or UnsecuredTokens()
    endpoint = TokenEndpoint(clients, lifetime_s)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = dict(urllib.parse.parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
            endpoint.requests.append(form)
            scheme, _, encoded = self.headers.get("Authorization", "").partition(" ")
            client_id, _, secret = (
                base64.b64decode(encoded).decode().partition(":") if scheme == "Basic" else ("", "", "")
            )
            client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
            if form.get("grant_type") != "client_credentials" or endpoint.clients.get(client_id) != secret:
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps(
                {"access_token": tokens.token(client_id, lifetime_s), "token_type": "Bearer", "expires_in": lifetime_s}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests read what they need from `requests`."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}/token"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
