"""An app's `table_followers`: which table to follow, by which version, into which compacted topic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.config.outbox import IDENTIFIER


class TableFollowerConfig(BaseModel):
    """One table, followed into one compacted topic by one follower (the app's first worker)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str
    topic: str  # compacted, declared under topics: its serdes encode each row's key and value
    key_column: str
    version_column: str  # set by every insert and update: a timestamp (`DEFAULT clock_timestamp()`) or a number
    dsn: str | None = None  # else the environment's DATABASE_URL
    fields: dict[str, str] | None = None  # the value's fields -> their columns; every column by its name if unset
    deleted_column: str | None = None  # a boolean column: a row where it is true is sent as a tombstone
    settle_ms: int = Field(default=5_000, ge=0)  # with a timestamp version: as the outbox's
    batch_size: int = Field(default=5_000, ge=1)
    poll_interval_ms: int = Field(default=1_000, ge=1)

    @field_validator("table", "key_column", "version_column", "deleted_column")
    @classmethod
    def _a_name(cls, name: str | None) -> str | None:
        if name is not None and not IDENTIFIER.match(name):
            raise ValueError(f"'{name}' is not a table or column name (letters, digits and _)")
        return name

    @field_validator("fields")
    @classmethod
    def _columns(cls, fields: dict[str, str] | None) -> dict[str, str] | None:
        for field, column in (fields or {}).items():
            if not IDENTIFIER.match(column):
                raise ValueError(f"{field}: '{column}' is not a column name (letters, digits and _)")
        return fields
