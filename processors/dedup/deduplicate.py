"""De-duplication: a record whose id was seen within `window_ms` of its time before it is dropped (and counted),
the others go on to `output` as they came.

Replays, rebalances and at-least-once producers (seeds 003 and 004) deliver some records twice; this is
the step that makes them once. Two records are duplicates when their ids are equal and their times at
most `window_ms` apart, whichever came first. The seen ids live in a key-value store with a TTL and a
changelog (RocksDB by default, stores/ttl.py): each id holds the times it was seen, and lives until stream
time passes the latest of them plus twice `window_ms`. So a record up to `window_ms` behind stream time
finds every time of its id within `window_ms` of it, whatever other ids moved stream time, and the store
holds two windows' worth of ids, however long the app runs. A record further behind is late: some ids it
may repeat are forgotten, so it is counted (`late_records`) and dropped, or sent to `late_topic`, rather
than let through as new. Under exactly-once the store, its changelog (expired ids leave it as tombstones at
the commit that expired them) and the outputs commit together, so a crash neither forgets an id nor lets a
record through twice.

The id is the record's `key`, a field of its value (`value.order_id`), or `value_hash`: a hash of the
whole value (a 16-byte BLAKE2b of its msgpack encoding), for records that carry no id of their own. A
record whose id is null (no key, a null field) is forwarded as it came, never a duplicate, as in Kafka
Streams (KIP-655); with `null_id: one_id` the null ids are one id, de-duplicated as any other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, ClassVar

import msgpack
from pydantic import BaseModel, ConfigDict, Field, field_validator

from processors.context import Context
from processors.fields import value_field
from processors.keyless import NullId
from processors.params import among_outputs
from processors.processor import Processor
from processors.record import Record
from processors.stores import TtlStore
from processors.windows.late import late_headers

DUPLICATES = "duplicates"  # ctx.count name: a record dropped as a duplicate
LATE = "late_records"  # ctx.count name: a record too far behind stream time to be checked


class DeduplicateParams(BaseModel):
    """`params` of `processors.dedup:Deduplicate` (docs/replay.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = "key"  # "key", "value.<field>" or "value_hash"
    window_ms: int = Field(gt=0)
    null_id: NullId = "alone"
    output: str
    late_topic: str | None = None  # default: late records are dropped (and counted)
    store: str | None = None  # default: "<processor>-seen"

    _among_outputs = field_validator("output", "late_topic")(
        classmethod(lambda cls, topic, info: among_outputs(topic, info))
    )

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
    value, headers and timestamp; drops (and counts, `duplicates`) the others, and the late ones (counted,
    `late_records`) unless `late_topic` takes them."""

    Params: ClassVar[type[DeduplicateParams]] = DeduplicateParams

    @classmethod
    def stores_for(cls, params: Any, name: str) -> dict[str, dict[str, Any]]:
        """Each id's times, kept until stream time passes the latest plus two windows: an on-time record, up
        to a window behind stream time, looks a window further back."""
        return {params.store_name(name): {"kind": "key_value", "ttl_ms": 2 * params.window_ms}}

    def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        self.output, self.late_topic, self.window_ms = params.output, params.late_topic, params.window_ms
        self.id_of, self.null_id_alone = id_reader(params.id), params.null_id == "alone"
        name = params.store_name(ctx.processor_name)
        seen = ctx.store(name)
        if not isinstance(seen, TtlStore):
            raise ValueError(f"store '{name}' has no ttl_ms: Deduplicate forgets its ids by it")
        self.seen = seen

    def process(self, record: Record, ctx: Context) -> None:
        found, timestamp, window = self.id_of(record), record.timestamp, self.window_ms
        if found is None and self.null_id_alone:
            ctx.send(self.output, record.value, key=record.key, headers=record.headers)
            return
        stream_time = self.seen.stream_time  # what its ids expire by
        if timestamp < stream_time - window:  # some ids it may repeat are forgotten
            ctx.count(LATE)
            if self.late_topic is not None:
                reason = f"more than window_ms ({window}) behind stream time: ids it may repeat are forgotten"
                headers = late_headers(record, reason, stream_time)
                ctx.send(self.late_topic, record.value, key=record.key, headers=headers)
            return
        seen: list[int] = self.seen.get(found) or []
        # Before it, or after it when records come out of order.
        if any(abs(timestamp - seen_at) <= window for seen_at in seen):
            ctx.count(DUPLICATES)
            return
        forgotten_below = stream_time - 2 * window  # no on-time record looks back that far
        times = sorted([seen_at for seen_at in seen if seen_at >= forgotten_below] + [timestamp])
        # Lives until stream time passes its latest time plus two windows (more than a window from now).
        self.seen.put(found, times, ttl_ms=times[-1] + 2 * window + 1 - stream_time)
        ctx.send(self.output, record.value, key=record.key, headers=record.headers)
