"""The `queries:` section of the app YAML: reads of the stores over HTTP, off unless given."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from runtime.config.common import Strict
from runtime.config.health import HealthConfig
from runtime.health.queries import ANY_ADDRESS


class QueriesConfig(Strict):
    """`GET /stores/NAME/KEY`, `GET /stores/NAME?prefix=P` and `?from=A&to=B`, served on the health port (`health:` is
    required): each worker answers for its own partitions and asks the owner of any other."""

    # The address the query endpoints answer on: a request reaching the health port on another one is
    # refused. The default keeps them to this machine; another address lets the workers of other hosts in.
    host: str = "127.0.0.1"
    # How the other workers reach this one; defaults to `host`, which must then be one they can reach.
    advertised_host: str | None = None
    # A bearer token every query must carry (`Authorization: Bearer ...`); none: queries are not authenticated.
    token: SecretStr | None = None
    # How long a read waits for the worker's event loop, and a worker for the one it asked on a key's behalf.
    timeout_s: float = Field(default=5.0, gt=0)
    # The most pairs one prefix read returns.
    max_items: int = Field(default=1_000, ge=1)

    @model_validator(mode="after")
    def _reachable(self) -> QueriesConfig:
        if self.host in ANY_ADDRESS and self.advertised_host is None:
            raise ValueError(
                f"host '{self.host}' is every address: give advertised_host, the one other workers reach this one at"
            )
        return self

    def advertised(self, port: int) -> str:
        """host:port, as the other workers are told to reach this one."""
        host = self.advertised_host or self.host
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def check_served_by(self, health: HealthConfig | None) -> None:
        """The queries are served by the health server: it must exist, and listen where they are answered."""
        if health is None:
            raise ValueError("queries: the queries are served on the health port: give a health section too")
        if health.host not in ANY_ADDRESS and self.host not in ANY_ADDRESS and self.host != health.host:
            raise ValueError(
                f"queries.host: '{self.host}' is not where the health server listens (health.host '{health.host}'): "
                "no query could reach it"
            )
