"""The store queries' side of the health server: who may ask, on which address, and the shape of an answer.

What a query reads is the worker's to say (`QueryAnswers`); the server only checks the request first: that
it reached the address the queries are served on, and that it carries the token when one is set.
"""

from __future__ import annotations

import hmac
import socket
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

ANY_ADDRESS = ("0.0.0.0", "::", "")
FORWARDED = "X-Query-Forwarded"
"""The header of a query one worker asks another on a key's behalf: that one answers, or refuses, but
never asks a third."""


@dataclass(frozen=True)
class Reply:
    status: HTTPStatus
    body: dict[str, Any]


@dataclass(frozen=True)
class QueryRequest:
    path: str  # /stores/NAME or /stores/NAME/KEY, still percent-encoded
    query: dict[str, list[str]]
    forwarded: bool
    authorization: str | None  # the request's own header, passed on when it is forwarded


class QueryAnswers(Protocol):
    def answer(self, request: QueryRequest) -> Reply: ...


@dataclass
class QueryEndpoint:
    answers: QueryAnswers
    host: str  # the address queries must reach; every one of the machine's when it is the any-address
    token: str | None
    _addresses: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.host not in ANY_ADDRESS:
            self._addresses = {str(info[4][0]) for info in socket.getaddrinfo(self.host, None)}

    def refusal(self, local_address: str, authorization: str | None) -> Reply | None:
        """Why a request is not answered, or None when it may be."""
        if self._addresses and local_address not in self._addresses:
            return Reply(HTTPStatus.FORBIDDEN, {"error": f"queries are served on {self.host} only (queries.host)"})
        if self.token is not None and not hmac.compare_digest(
            (authorization or "").encode(), f"Bearer {self.token}".encode()
        ):
            return Reply(HTTPStatus.UNAUTHORIZED, {"error": "a query needs the header Authorization: Bearer <token>"})
        return None
