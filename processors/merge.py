"""A processor that chooses which of its inputs' records it takes next: the base of merge joins."""

from __future__ import annotations

from collections.abc import Mapping

from processors.processor import Processor
from processors.record import Record


class MergeProcessor(Processor):
    """Sees the first record queued of each input and says which one `process` gets next.

    A task of a plain processor decides the order itself (offset order, or timestamp order across
    several inputs). A merge processor decides it: whenever a record of any input is queued, the task
    calls `choose(heads)` with the first queued record of each input that has one, keyed by topic,
    and passes the record of the topic it returns to `process`, then asks again. Returning None waits
    for more records: `choose` is called again when a record arrives for an input that had none
    queued. Each input has its own bounded queue that pauses and resumes its fetching alone, so an
    input whose records wait never holds back the other one's.

    `choose` must be quick and must not send records or write stores (it may be called again with the
    same heads after a restart); it may remember what it saw for the `process` call that follows,
    which is always for the record it chose. Each topic of a merge processor, broadcast or not, has
    one partition per task, so a topic names its queue.
    """

    def choose(self, heads: Mapping[str, Record]) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} must implement choose(heads)")
