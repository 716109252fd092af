"""The `kafka` section: how to reach the cluster, and options for aiokafka's clients."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from runtime.config.common import Strict
from runtime.config.kafka_options import option_problems
from runtime.redaction import USERINFO, redact
from stores.kafka_security import KafkaSecurity


class KafkaConfig(Strict):
    """Connection. The option maps are passed to aiokafka, once checked against its clients' constructors."""

    bootstrap_servers: str | None = None
    # Static membership (KIP-345): what names this process across restarts (a StatefulSet's ${POD_NAME});
    # each worker of `--workers N` joins as `<it>-<index>`. None: a new member at every start.
    group_instance_id: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9._-]{1,240}$")
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)
    client: dict[str, Any] = Field(default_factory=dict)
    consumer: dict[str, Any] = Field(default_factory=dict)
    producer: dict[str, Any] = Field(default_factory=dict)

    @field_validator("bootstrap_servers")
    @classmethod
    def _no_credentials(cls, servers: str | None) -> str | None:
        if servers is not None and USERINFO.search(servers):
            raise ValueError(
                f"'{redact(servers)}' holds credentials; Kafka takes them from kafka.security "
                "(protocol, sasl.mechanism, sasl.username, sasl.password)"
            )
        return servers

    @model_validator(mode="after")
    def _options_aiokafka_accepts(self) -> KafkaConfig:
        sections = {"kafka.client": self.client, "kafka.consumer": self.consumer, "kafka.producer": self.producer}
        problems = [problem for section, options in sections.items() for problem in option_problems(section, options)]
        if problems:
            raise ValueError("\n".join(problems))
        return self
