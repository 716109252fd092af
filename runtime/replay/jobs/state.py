"""A replay job as the jobs topic holds it: the request, and where the job stands.

The job's id is the record's key and its state the value, so compaction keeps each job's latest. A job
moves OPEN (requested, nobody runs it) → STARTED (a worker claimed it and fixed the partition and the
offsets it reads) → ONGOING (records being replayed; each state carries the offset reached and a
heartbeat) → COMPLETED, or FAILED with the reason. A STARTED or ONGOING job whose heartbeat is older
than the takeover timeout belongs to a worker that is gone: another claims it and goes on from the
offset it reached.
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.commands.times import parse_time
from runtime.replay.partitioners import DEFAULT, PARTITIONERS


class Status(StrEnum):
    OPEN = "OPEN"
    STARTED = "STARTED"
    ONGOING = "ONGOING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

    @property
    def ended(self) -> bool:
        return self in (Status.COMPLETED, Status.FAILED)


class ReplayRequest(BaseModel):
    """What a request on the requests topic asks for, as JSON: `{"id", "topic", "key" | "partition",
    "partitioner", "from", "to", "target"}`, the times in ISO 8601 or milliseconds since the epoch, the key
    as text (encoded with the topic's key serde of the app YAML, and placed by the partitioner named, as
    `python -m runtime replay --key --partitioner` does)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str = Field(min_length=1)
    topic: str = Field(min_length=1)
    key: str | None = None
    partition: int | None = Field(default=None, ge=0)
    partitioner: str = DEFAULT
    start_ms: int | None = Field(default=None, alias="from")
    end_ms: int | None = Field(default=None, alias="to")
    target: str = Field(min_length=1)

    @field_validator("start_ms", "end_ms", mode="before")
    @classmethod
    def _a_time(cls, value: Any) -> Any:
        try:
            return parse_time(value) if isinstance(value, str) else value
        except ArgumentTypeError as error:
            raise ValueError(str(error)) from None

    @field_validator("partitioner")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in PARTITIONERS:
            raise ValueError(f"unknown partitioner '{name}': expected one of librdkafka's, {', '.join(PARTITIONERS)}")
        return name

    @model_validator(mode="after")
    def _what_and_when(self) -> ReplayRequest:
        if (self.key is None) == (self.partition is None):
            raise ValueError("give either key or partition")
        if self.partition is not None and self.partitioner != DEFAULT:
            raise ValueError("a partitioner places a key; partition names the partition itself")
        if self.start_ms is not None and self.end_ms is not None and self.end_ms <= self.start_ms:
            raise ValueError("'to' must come after 'from'")
        if self.target == self.topic:
            raise ValueError("the target is the topic replayed: the replay would never end")
        return self

    def encode(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class JobState(BaseModel):
    """One state of a job. `request` is None only for a request that could not be read (FAILED)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    status: Status
    request: ReplayRequest | None = None
    owner: str | None = None  # the worker running it
    heartbeat_ms: int = 0  # when its owner last said it runs it
    partition: int | None = None  # fixed when first started, with the offsets below
    beginning: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    next_offset: int | None = None  # where reading goes on
    scanned: int = 0
    matched: int = 0
    reason: str | None = None

    def encode(self) -> bytes:
        return self.model_dump_json(exclude_defaults=True).encode()

    @classmethod
    def decode(cls, data: bytes | str) -> JobState:
        return cls.model_validate_json(data)

    @property
    def share_read(self) -> float:
        """How much of its span the job has read, from 0 (not started) to 1."""
        if self.next_offset is None or self.start_offset is None or self.end_offset is None:
            return 0.0
        if self.end_offset <= self.start_offset:
            return 1.0
        return (self.next_offset - self.start_offset) / (self.end_offset - self.start_offset)

    def abandoned(self, now_ms: int, takeover_after_ms: int) -> bool:
        """Claimed, but its owner has not said it runs it for `takeover_after_ms`."""
        return self.status in (Status.STARTED, Status.ONGOING) and now_ms - self.heartbeat_ms >= takeover_after_ms

    def claimable(self, now_ms: int, takeover_after_ms: int) -> bool:
        return self.status is Status.OPEN or self.abandoned(now_ms, takeover_after_ms)
