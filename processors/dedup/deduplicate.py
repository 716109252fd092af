"""De-duplication: each record's id is remembered for `window_ms` of stream time; a record whose id was seen
within that window before it is dropped (and counted), the others go on to `output` as they came.

Replays, rebalances and at-least-once producers (seeds 003 and 004) deliver some records twice; this is
the step that makes them once. Two records are duplicates when their ids are equal and their times at
most `window_ms` apart, whichever came first. The seen ids live in a window store with a changelog (RocksDB by
default): an id's entry sits in the bucket of `window_ms` its record's time falls in, holding that
time, so a lookup reads at most two buckets, and buckets older than the window leave the store (with
tombstones in its changelog) as stream time passes them. Under exactly-once the store, its changelog and
the outputs commit together, so a crash neither forgets an id nor lets a record through twice.

The id is the record's `key`, a field of its value (`value.order_id`), or `value_hash`: a hash of the
whole value (a 16-byte BLAKE2b of its msgpack encoding), for records that carry no id of their own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, ClassVar

import msgpack
from pydantic import BaseModel, ConfigDict, Field, field_validator

from processors.context import Context
from processors.fields import value_field
from processors.params import among_outputs
from processors.processor import Processor
from processors.record import Record

DUPLICATES = "duplicates"  # ctx.count name: a record dropped as a duplicate


class DeduplicateParams(BaseModel):
    """`params` of `processors.dedup:Deduplicate` (docs/replay.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = "key"  # "key", "value.<field>" or "value_hash"
    window_ms: int = Field(gt=0)
    output: str
    store: str | None = None  # default: "<processor>-seen"

    _among_outputs = field_validator("output")(classmethod(lambda cls, topic, info: among_outputs(topic, info)))

    @field_validator("id")
    @classmethod
    def _an_id(cls, spec: str) -> str:
        if spec not in ("key", "value_hash") and not (spec.startswith("value.") and len(spec) > len("value.")):
            raise ValueError(f"'{spec}' is none of key, value.<field>, value_hash")
        return spec

    def store_name(self, processor: str) -> str:
        return self.store or f"{processor}-seen"


def id_reader(spec: str) -> Callable[[Record], Any]:
    if spec == "key":
        return lambda record: record.key
    if spec == "value_hash":
        return lambda record: hashlib.blake2b(msgpack.packb(record.value), digest_size=16).digest()
    return value_field(spec.removeprefix("value."), _no_id_field)


def _no_id_field(path: str) -> Exception:
    return KeyError(f"the record's value has no field '{path}' to take its id from")


class Deduplicate(Processor):
    """Sends each record whose id was not seen within `window_ms` before it to `output`, with its key,
    value, headers and timestamp; drops (and counts, `duplicates`) the others."""

    Params: ClassVar[type[DeduplicateParams]] = DeduplicateParams

    @classmethod
    def stores_for(cls, params: Any, name: str) -> dict[str, dict[str, Any]]:
        """Ids by the bucket of `window_ms` their record fell in, kept two buckets: the window reaches back
        into the one before."""
        return {params.store_name(name): {"kind": "window", "retention_ms": 2 * params.window_ms}}

    def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        self.output, self.window_ms = params.output, params.window_ms
        self.id_of = id_reader(params.id)
        self.seen = ctx.window_store(params.store_name(ctx.processor_name))

    def process(self, record: Record, ctx: Context) -> None:
        found, timestamp = self.id_of(record), record.timestamp
        self.seen.advance(timestamp)
        window = self.window_ms
        for _, seen_at in self.seen.fetch(found, timestamp - window - window, timestamp + window):
            if abs(timestamp - seen_at) <= window:  # before it, or after it when records come out of order
                ctx.count(DUPLICATES)
                return
        self.seen.put(found, timestamp - timestamp % window, timestamp)
        ctx.send(self.output, record.value, key=record.key, headers=record.headers)
