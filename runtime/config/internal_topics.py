"""The `internal_topics` section: how the runtime creates the topics it names after the app."""

from __future__ import annotations

from pydantic import Field, field_validator

from runtime.config.common import Strict, replicas
from runtime.config.topics import TopicConfig
from stores.replication import BROKER_DEFAULT

CHOSEN_BY_THE_RUNTIME = ("cleanup.policy",)


class InternalTopicsConfig(Strict):
    """Changelogs, repartition and dead-letter topics, the outbox's and table follower's positions, the
    replay jobs' and the rewinds' topics: on a cluster they want the replicas its own topics have."""

    replication_factor: int = BROKER_DEFAULT
    configs: dict[str, str] = Field(default_factory=dict)  # any topic config, at creation (min.insync.replicas)

    _replicas = field_validator("replication_factor")(classmethod(lambda cls, factor: replicas(factor)))

    @field_validator("configs")
    @classmethod
    def _policy_stays_the_runtimes(cls, configs: dict[str, str]) -> dict[str, str]:
        for name in CHOSEN_BY_THE_RUNTIME:
            if name in configs:
                raise ValueError(f"{name} is chosen by the runtime for each topic (a changelog is compacted)")
        return configs

    def topic(self, *, partitions: int, key_serde: str, value_serde: str) -> TopicConfig:
        """An internal topic the app reads and writes as it does its declared ones (repartition, dead letters)."""
        return TopicConfig(
            partitions=partitions,
            replication_factor=self.replication_factor,
            key_serde=key_serde,
            value_serde=value_serde,
            config=dict(self.configs),
        )
