"""The `health:` section of the app YAML: off unless given."""

from __future__ import annotations

from pydantic import Field

from runtime.config.common import Strict


class HealthConfig(Strict):
    """`GET /live` and `GET /ready` on http://host:port; under `--workers N` worker i listens on port + i,
    as the Prometheus endpoint does."""

    host: str = "0.0.0.0"
    port: int = Field(default=8080, ge=1, le=65535)
    # /live answers 503 once the event loop has not turned for this long: a processor blocked it.
    stall_s: float = Field(default=30.0, gt=0)
