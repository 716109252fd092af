"""The one input every peer reads: `bench.data`'s JSON records, with record timestamps spread over whole minutes
so that 1-minute windows close while the input is read, and what a correct peer makes of it."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from bench.data import make_key
from stores.partitioner import partition_for

WINDOW_MS = 60_000
# Every timestamp lies this far or more in the past when the input is written: a broker takes none
# from the future beyond `log.message.timestamp.after.max.ms` (1 hour by default since Kafka 4.0).
PAST_MS = 3_600_000


@dataclass(frozen=True)
class Input:
    """`records` records over `keys` keys (record i has key i mod keys) in `partitions` partitions.

    Record i's timestamp is `first_window + i * WINDOW_MS // (2 * keys)`: each 1-minute window holds
    2 * keys consecutive records, so every key twice, and the windows follow each other in the input.
    """

    records: int
    keys: int
    partitions: int
    first_window: int

    @classmethod
    def now(cls, records: int, keys: int, partitions: int) -> Input:
        """The input whose last timestamp is `PAST_MS` before now, its first window starting on a minute."""
        span = records * WINDOW_MS // (2 * keys)
        first = (int(time.time() * 1000) - PAST_MS - span) // WINDOW_MS * WINDOW_MS
        return cls(records, keys, partitions, first)

    @property
    def records_per_window(self) -> int:
        return 2 * self.keys

    def timestamp(self, index: int) -> int:
        return self.first_window + index * WINDOW_MS // self.records_per_window

    def window_start(self, index: int) -> int:
        return self.first_window + index // self.records_per_window * WINDOW_MS

    def key_counts(self) -> dict[str, int]:
        """How many records each key has."""
        full, rest = divmod(self.records, self.keys)
        return {make_key(slot, self.keys): full + (slot < rest) for slot in range(min(self.keys, self.records))}

    @cached_property
    def closed_windows(self) -> dict[tuple[str, int], int]:
        """The count of each (key, window start) whose window closes by the end of the input, at grace 0.

        A window closes when its partition's stream time (its largest timestamp) reaches the window's
        end, as in Kafka Streams. Keyed closing (Quix Streams' default: a key's own latest timestamp)
        closes the same windows as long as every key has a record in the last window, which holds when
        the last window has `keys` records or more (see `last_window_holds_every_key`).
        """
        slots = min(self.keys, self.records)
        partitions = [partition_for(make_key(slot, self.keys).encode(), self.partitions) for slot in range(slots)]
        stream_time = [-1] * self.partitions
        for index in range(max(0, self.records - slots), self.records):
            slot = index % self.keys
            stream_time[partitions[slot]] = max(stream_time[partitions[slot]], self.timestamp(index))
        counts: Counter[tuple[str, int]] = Counter()
        for index in range(self.records):
            slot = index % self.keys
            start = self.window_start(index)
            if start + WINDOW_MS <= stream_time[partitions[slot]]:
                counts[make_key(slot, self.keys), start] += 1
        return dict(counts)

    @cached_property
    def closed_window_id_sums(self) -> dict[tuple[str, int], int]:
        """The sum of the records' `id` (their index) in each window of `closed_windows`."""
        closed = self.closed_windows
        sums: Counter[tuple[str, int]] = Counter()
        for index in range(self.records):
            window = (make_key(index % self.keys, self.keys), self.window_start(index))
            if window in closed:
                sums[window] += index
        return dict(sums)

    @cached_property
    def window_counts(self) -> dict[tuple[str, int], int]:
        """The count of each (key, window start), closed by the end of the input or not."""
        return dict(
            Counter((make_key(index % self.keys, self.keys), self.window_start(index)) for index in range(self.records))
        )

    def last_window_holds_every_key(self) -> bool:
        rest = self.records % self.records_per_window
        return rest == 0 or rest >= self.keys

    def windows(self) -> int:
        """How many windows the input's timestamps touch."""
        return -(-self.records // self.records_per_window)
