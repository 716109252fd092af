"""An app's `outboxes`: which table to poll, which columns make a record, and how long rows settle."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


class OutboxConfig(BaseModel):
    """One outbox table, shipped to Kafka in id order by one poller (the app's first worker)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str
    dsn: str | None = None  # else the environment's DATABASE_URL
    id_column: str = "id"  # increasing: a sequence (bigint) or a ULID (text)
    topic: str | None = None  # every row to this topic, or each to its row's `topic_column`
    topic_column: str | None = None
    key_column: str | None = "key"
    value_column: str = "value"  # bytea, text, json or jsonb
    headers_column: str | None = None  # a json(b) object of names to text values
    created_column: str = "created_at"  # when the row was written, by the database's clock
    settle_ms: int = Field(default=5_000, ge=0)
    batch_size: int = Field(default=5_000, ge=1)
    poll_interval_ms: int = Field(default=100, ge=1)
    delete_shipped: bool = False

    @field_validator(
        "table", "id_column", "topic_column", "key_column", "value_column", "headers_column", "created_column"
    )
    @classmethod
    def _a_name(cls, name: str | None) -> str | None:
        if name is not None and not IDENTIFIER.match(name):
            raise ValueError(f"'{name}' is not a table or column name (letters, digits and _)")
        return name

    @model_validator(mode="after")
    def _one_topic(self) -> OutboxConfig:
        if (self.topic is None) == (self.topic_column is None):
            raise ValueError("give either topic (every row's) or topic_column (each row's own)")
        return self
