"""The `topics` section: each topic's partitions, serdes, schemas and event time."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from runtime.config.common import MAX_PARTITIONS, Strict, duration_ms, known_topic_serde, replicas
from runtime.config.registry_topics import check_schema_file
from runtime.config.timestamps import TimestampConfig
from stores.replication import BROKER_DEFAULT

# How far ahead of the wall clock an input record's event time may be (docs/configuration.md, "Records
# from the future"): above any clock skew between hosts, below the smallest error of a time zone (30 min).
DEFAULT_MAX_AHEAD_MS = 15 * 60_000


class TopicConfig(Strict):
    partitions: int = Field(default=1, ge=1, le=MAX_PARTITIONS)
    replication_factor: int = BROKER_DEFAULT  # used when the topic is created; -1: the broker's default
    key_serde: str = "msgpack"
    value_serde: str = "msgpack"
    # With a registry serde: the schema the app writes with and reads into (an Avro .avsc, a JSON
    # Schema); without one, it writes with the subject's latest schema and reads with each record's.
    key_schema: Path | None = None
    value_schema: Path | None = None
    cleanup_policy: Literal["delete", "compact", "compact,delete"] = "delete"
    config: dict[str, str] = Field(default_factory=dict)
    timestamp: TimestampConfig | None = None  # None: the Kafka record's timestamp
    max_ahead: int | None = Field(default=DEFAULT_MAX_AHEAD_MS, ge=0)  # ms, or "15m"; None: no bound

    _serdes_exist = field_validator("key_serde", "value_serde")(classmethod(lambda cls, name: known_topic_serde(name)))
    _replicas = field_validator("replication_factor")(classmethod(lambda cls, factor: replicas(factor)))
    _a_duration = field_validator("max_ahead", mode="before")(classmethod(lambda cls, ahead: duration_ms(ahead)))

    @field_validator("key_schema", "value_schema")
    @classmethod
    def _schema_fits_its_serde(cls, schema: Path | None, info: ValidationInfo) -> Path | None:
        serde = info.data.get(str(info.field_name).replace("_schema", "_serde"))
        if schema is not None and serde is not None:
            check_schema_file(serde, schema)
        return schema
