"""Event time across a repartition topic: each task writing to one stamps its progress into every partition
at each commit, and a task reading one holds its stream time at the least progress of the tasks upstream.

Without it, a stalled upstream task (its worker killed, or slow) lets the reading task's stream time run on
with the records of the others, and when the stalled one comes back its records are late. With it:

1. At each commit, after its outputs, a task writing to a repartition topic sends every partition of the topic
   a **stamp** (`Stamp`): which upstream task it is, its stream time, whether it is **caught up** (nothing queued
   or in flight, and Kafka holds nothing more of its inputs), and the wall clock. In a partition a stamp comes
   after every record its task sent before it, and under exactly-once in the same transaction.
2. The reading task takes the stamps out of its input as it meets them, after the records before them
   (`RecordLoop`), and keeps each upstream task's greatest stream time (`UpstreamProgress`).
3. Its stream time is then its records' greatest timestamp, but never past the **watermark**: the least
   stream time of the upstream tasks, once each of them has stamped. A caught-up task does not hold the others
   back (a partition that gets no records would hold them for good), for as long as its stamps keep coming:
   one that stops stamping for `STALE_COMMITS` commit intervals (by the stamps' own clocks, next to the newest
   stamp) holds the watermark at its stream time, caught up or not, until it stamps again. A task that starts
   holds its stream time where it is until every upstream task has stamped.

What it cannot cover: a caught-up task that later gets records older than the others' stream time (a producer
writing late into one partition) still makes them late, as without stamps; a task that stops stamping while
caught up is held only after `STALE_COMMITS` intervals, so the others' time may run that far ahead first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from runtime.config import AppConfig, ProcessorConfig
from runtime.kafka.outputs import Outputs
from runtime.task.clock import Clock
from runtime.task.context import NEVER

STAMP_HEADER: Final = "kafka-actor.progress"
"""The header that marks a stamp: the first and only header of the record."""
STALE_COMMITS: Final = 3
STALE_AT_LEAST_MS: Final = 1000
_STAMP_HEADERS: Final = ((STAMP_HEADER, b""),)


class Stamp(msgspec.Struct, frozen=True):
    """One upstream task's progress, as a stamp record's value."""

    task: int  # the upstream task's partition
    time: int  # its stream time; -1 before its first record
    caught_up: bool
    at: int  # its wall clock, epoch ms

    def encode(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, value: bytes | None) -> Stamp:
        if value is None:
            raise ValueError("a progress stamp without a value")
        return _DECODER.decode(value)


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Stamp)


def is_stamp(raw: Any) -> bool:
    """Whether a record read from a repartition topic is a stamp rather than a record for the processor."""
    headers = raw.headers
    return bool(headers) and headers[0][0] == STAMP_HEADER


def stale_after_ms(commit_interval_s: float) -> int:
    """How long an upstream task may go without stamping before its being caught up no longer counts."""
    return max(STALE_AT_LEAST_MS, int(STALE_COMMITS * commit_interval_s * 1000))


@dataclass(frozen=True)
class _Known:
    time: int
    caught_up: bool
    at: int


class UpstreamProgress:
    """What the tasks upstream of one partition of repartition topic `topic` stamped: `sources` of them."""

    def __init__(self, topic: str, sources: int, stale_after_ms: int):
        self.topic = topic
        self.sources = sources
        self._stale_after_ms = stale_after_ms
        self._known: dict[int, _Known] = {}
        self._newest_at = 0

    def take(self, stamp: Stamp) -> None:
        """A stamp, in its place in the partition: a task's stream time never goes back here (after a restart
        it starts again from -1, below what it stamped before)."""
        before = self._known.get(stamp.task)
        time = stamp.time if before is None or stamp.time > before.time else before.time
        self._known[stamp.task] = _Known(time, stamp.caught_up, stamp.at)
        self._newest_at = max(self._newest_at, stamp.at)

    @property
    def watermark(self) -> int:
        """The stream time the reading task may not pass: -1 until every upstream task stamped; NEVER when all
        of them are caught up and stamping."""
        if len(self._known) < self.sources:
            return -1
        fresh_from = self._newest_at - self._stale_after_ms
        held = [known.time for known in self._known.values() if not (known.caught_up and known.at >= fresh_from)]
        return min(held, default=NEVER)

    def mark(self) -> Mapping[int, _Known]:
        return dict(self._known)

    def go_back_to(self, mark: Mapping[int, _Known]) -> None:
        """The task goes back to committed offsets: the stamps after them are read again."""
        self._known = dict(mark)
        self._newest_at = max((known.at for known in mark.values()), default=0)


class ProgressStamps:
    """Step 1, for one task writing to repartition topics: `topics` maps each to its partition count."""

    def __init__(self, task: int, topics: Mapping[str, int], clock: Clock, refresh_ms: int | None):
        self._task = task
        self._topics = dict(topics)
        self._clock = clock
        self._refresh_ms = refresh_ms
        self._last: Stamp | None = None

    def stamp(self, outputs: Outputs, stream_time: int, caught_up: bool) -> None:
        """Sent after the task's outputs when its progress changed, and `refresh_ms` after the last one when it
        did not, so that a caught-up task stays fresh (None: never, in a bounded run, which stops once caught
        up, and whose check that its inputs stopped growing would wait for each refresh). Its timestamp is the
        stream time, so a reading task that orders its inputs by time (a table beside) meets it in its place."""
        now, last = self._clock.epoch_ms(), self._last
        unchanged = last is not None and (last.time, last.caught_up) == (stream_time, caught_up)
        if unchanged and last is not None and (self._refresh_ms is None or now - last.at < self._refresh_ms):
            return
        self._last = stamp = Stamp(self._task, stream_time, caught_up, now)
        value = stamp.encode()
        timestamp = max(stream_time, 0)
        for topic, partitions in self._topics.items():
            for partition in range(partitions):
                outputs.append(topic, None, value, _STAMP_HEADERS, partition, timestamp)


def stamps_of(
    config: AppConfig, spec: ProcessorConfig, partition: int, outputs: Outputs, clock: Clock, bounded: bool
) -> ProgressStamps | None:
    """The stamps of a task of `spec`, if it writes to repartition topics; refreshed a third of the stale time
    after the last, unless the run is `bounded`."""
    repartition = set(config.repartition_topics())
    topics = {topic: outputs.partitions(topic) for topic in spec.outputs if topic in repartition}
    if not topics:
        return None
    refresh_ms = None if bounded else stale_after_ms(config.commit_interval_s) // STALE_COMMITS
    return ProgressStamps(partition, topics, clock, refresh_ms)


def progress_of(config: AppConfig, spec: ProcessorConfig, outputs: Outputs) -> UpstreamProgress | None:
    """The upstream progress a task of `spec` keeps, if it reads a repartition topic: its upstream tasks are
    those of the stage writing the topic, one per partition of the stage's inputs."""
    topic = spec.repartition_topic
    if topic is None:
        return None
    stage = next(processor for processor in config.processors if topic in processor.outputs)
    return UpstreamProgress(topic, outputs.partitions(stage.inputs[0]), stale_after_ms(config.commit_interval_s))
