"""Asking a worker's health endpoints, as an orchestrator's probe does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

Answer = tuple[int, dict[str, Any]]


def probe(port: int, path: str) -> Answer | None:
    """The status and JSON body, or None when nothing listens (not yet, or no more)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except (ConnectionError, urllib.error.URLError):
        return None
