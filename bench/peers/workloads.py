"""The jobs the peers do on the same input, and how each one's output is checked against it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from bench.data import make_key
from bench.peers.inputs import Input
from bench.peers.peer_args import AWAIT_MS

# What a peer's app does; the peers' apps take these names (`--workload`).
TRANSFORM = "transform"
COUNT = "count"
WINDOW = "window"
# Variants of the window job that only this runtime runs, each measured against its `window` job.
WINDOW_AGGREGATIONS = "window-aggregations"  # the count and the sum of the records' `id`, in one window
WINDOW_EARLY = "window-early"  # the count, and its result early after each record of a window
WINDOW_KINDS = frozenset({WINDOW, WINDOW_AGGREGATIONS, WINDOW_EARLY})
AWAIT = "await"  # the stateless job after awaiting `AWAIT_MS` per record, many records in flight


@dataclass(frozen=True)
class Workload:
    """One job (`kind`) under one delivery guarantee."""

    name: str
    kind: str
    guarantee: str
    summary: str
    compared_with: str | None = None  # a workload of this runtime's that this one varies, and that alone runs it


WORKLOADS = (
    Workload("stateless", TRANSFORM, "at_least_once", "decode the JSON value, add a field, encode it, same key"),
    Workload("count", COUNT, "at_least_once", "count per key in a RocksDB store with a changelog, every update out"),
    Workload("stateless-eos", TRANSFORM, "exactly_once", "the stateless job under exactly-once"),
    Workload("window", WINDOW, "at_least_once", "1-minute tumbling count per key, one final result per window"),
    Workload("await", AWAIT, "at_least_once", f"await {AWAIT_MS} ms per record, then the stateless job"),
    Workload(
        "window-2-aggregations",
        WINDOW_AGGREGATIONS,
        "at_least_once",
        "the window job with two aggregations, the count and the sum of a field (this runtime only)",
        compared_with="window",
    ),
    Workload(
        "window-early",
        WINDOW_EARLY,
        "at_least_once",
        "the window job with early results after every record of a window, 2 of each key's windows, then the "
        "final one (this runtime only)",
        compared_with="window",
    ),
)


@dataclass(frozen=True)
class Check:
    """What a peer wrote against what the input makes: `ok`, and if not, what differs."""

    ok: bool
    detail: str


def expected_outputs(workload: Workload, source: Input) -> int:
    """How many records a correct peer writes: one per input record, or one per closed window (and with
    early results, one per record besides)."""
    if workload.kind == WINDOW_EARLY:
        return len(source.closed_windows) + source.records
    return len(source.closed_windows) if workload.kind in WINDOW_KINDS else source.records


class OutputCheck(ABC):
    """Takes the output records one by one (key, decoded JSON value), then says how they differ from what
    `source` makes under the workload. Keeps little per record: outputs can be millions."""

    @abstractmethod
    def add(self, key: str, value: Any) -> None: ...

    @abstractmethod
    def result(self) -> Check: ...


def output_check(workload: Workload, source: Input) -> OutputCheck:
    if workload.kind in (TRANSFORM, AWAIT):  # the await job's outputs are the stateless job's, in any order
        return TransformCheck(source)
    if workload.kind == COUNT:
        return CountCheck(source)
    if workload.kind == WINDOW_AGGREGATIONS:
        return AggregationsCheck(source)
    if workload.kind == WINDOW_EARLY:
        return EarlyCheck(source)
    return WindowCheck(source)


class TransformCheck(OutputCheck):
    """Each input record once, under its own key, with the added field."""

    def __init__(self, source: Input) -> None:
        self._source = source
        self._seen = bytearray(source.records)  # times each record id was written, up to 255
        self._wrong = 0

    def add(self, key: str, value: Any) -> None:
        index = value["id"]
        if 0 <= index < len(self._seen):
            self._seen[index] = min(255, self._seen[index] + 1)
        self._wrong += value.get("seen") is not True or key != make_key(index, self._source.keys)

    def result(self) -> Check:
        missing = self._seen.count(0)
        duplicates = sum(self._seen) - (len(self._seen) - missing)
        return verdict(missing=missing, duplicates=duplicates, wrong=self._wrong)


class CountCheck(OutputCheck):
    """Each key's updates count 1, 2, ... up to its number of records, each once."""

    def __init__(self, source: Input) -> None:
        self._records = source.key_counts()
        self._updates: defaultdict[str, Counter[int]] = defaultdict(Counter)
        self._wrong = 0

    def add(self, key: str, value: Any) -> None:
        self._updates[key][value["count"]] += 1
        self._wrong += value.get("key") != key

    def result(self) -> Check:
        missing = duplicates = 0
        wrong = self._wrong
        for key, counted in self._updates.items():
            records = self._records.get(key, 0)
            duplicates += sum(times - 1 for times in counted.values())
            wrong += sum(times for count, times in counted.items() if not 1 <= count <= records)
        for key, records in self._records.items():
            counted = self._updates.get(key, Counter())
            missing += sum(1 for count in range(1, records + 1) if count not in counted)
        return verdict(missing=missing, duplicates=duplicates, wrong=wrong)


class WindowCheck(OutputCheck):
    """One result per closed window, holding the window's count; none for a window still open.

    The peers' apps write the count as `count`, as their docs' examples name it; the runtime's `Aggregate`
    processor writes its documented output, the result as `value` (docs/windows.md).
    """

    def __init__(self, source: Input) -> None:
        self._expected = source.closed_windows
        self._emitted: Counter[tuple[str, int]] = Counter()
        self._wrong = 0

    def add(self, key: str, value: Any) -> None:
        window = (key, int(value["start"]))
        self._emitted[window] += 1
        self._wrong += self._expected.get(window) != value.get("count", value.get("value"))

    def result(self) -> Check:
        missing = sum(1 for window in self._expected if window not in self._emitted)
        duplicates = sum(times - 1 for times in self._emitted.values())
        return verdict(missing=missing, duplicates=duplicates, wrong=self._wrong)


class AggregationsCheck(WindowCheck):
    """As the window job's, each result holding the count (`n`) and the sum of the window's records' ids
    (`total`)."""

    def __init__(self, source: Input) -> None:
        super().__init__(source)
        self._totals = source.closed_window_id_sums

    def add(self, key: str, value: Any) -> None:
        window = (key, int(value["start"]))
        self._emitted[window] += 1
        result = value["value"]
        self._wrong += (self._expected.get(window), self._totals.get(window)) != (result["n"], result["total"])


class EarlyCheck(OutputCheck):
    """Every window's early results count 1, 2, ... up to its records, each once, marked early (the last
    window's too, though it stays open); then its final result, as the window job's."""

    def __init__(self, source: Input) -> None:
        self._finals = WindowCheck(source)
        self._records = source.window_counts
        self._early: defaultdict[tuple[str, int], Counter[int]] = defaultdict(Counter)

    def add(self, key: str, value: Any) -> None:
        if value.get("early") is True:
            self._early[(key, int(value["start"]))][value["value"]] += 1
        else:
            self._finals.add(key, value)

    def result(self) -> Check:
        finals = self._finals.result()
        missing = duplicates = wrong = 0
        for window, records in self._records.items():
            counted = self._early.get(window, Counter())
            missing += sum(1 for count in range(1, records + 1) if count not in counted)
            duplicates += sum(times - 1 for times in counted.values())
            wrong += sum(times for count, times in counted.items() if not 1 <= count <= records)
        wrong += sum(sum(counted.values()) for window, counted in self._early.items() if window not in self._records)
        early = verdict(missing=missing, duplicates=duplicates, wrong=wrong)
        if early.ok:
            return finals
        return Check(False, f"early results: {early.detail}; final results: {finals.detail}")


def verdict(**differences: int) -> Check:
    found = {name: number for name, number in differences.items() if number}
    detail = ", ".join(f"{number:,} {name}" for name, number in found.items())
    return Check(not found, detail or "as expected")
