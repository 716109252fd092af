"""How the engine tells a record's outputs which trace headers to carry: by the class of one value.

The value is chosen once per record (by `RecordTracer.decide`, or by the record's span) and travels
from the task's loop through `Context.send` into the batch builder (`Outputs.append`). Its class is
the message, so each of these steps pays one class comparison and no call, and a dropped record (the
common case) costs one bytes object, which the garbage collector does not track:

- `bytes` (`Traceparent`): a `traceparent` value, the only propagation header; it becomes a header
  only as the batch builder reads it, so no list per record lives through a batch;
- `list` (`Fields`): the propagation headers (traceparent, tracestate, baggage) as (name, value)
  pairs; the record's outputs share it, so it is never changed in place;
- the empty tuple (`UNTRACED`): tracing is off, and the outputs keep the headers the processor gives.

Before a record is processed, its decision may also be an `int`, the id of a new sampled trace, or
`None`, for its span to decide: such a record gets a span, and its outputs carry the span's fields.
"""

from __future__ import annotations

from typing import Final

TRACEPARENT: Final = "traceparent"

Traceparent = bytes
Fields = list[tuple[str, bytes]]
OutputContext = Fields | Traceparent
"""What a traced record's outputs carry."""
Untraced = tuple[()]
CarriedContext = OutputContext | Untraced
"""What a record's outputs carry, traced or not (`TaskContext.trace_fields`)."""
TraceDecision = CarriedContext | int | None
"""A record's, before it is processed: what its outputs carry (it gets no span), or a span's start."""

UNTRACED: Final[Untraced] = ()

# The classes themselves, for the per-record checks (`value.__class__ is ...`, `in`).
TRACEPARENT_CLASS: Final = bytes
UNTRACED_CLASS: Final = tuple
CARRIED_CLASSES: Final[frozenset[type]] = frozenset((TRACEPARENT_CLASS, list, UNTRACED_CLASS))
"""A decision of one of these classes is what the record's outputs carry: the record gets no span."""


def fields_of(context: OutputContext) -> Fields:
    """An output context as headers."""
    return [(TRACEPARENT, context)] if isinstance(context, Traceparent) else context
