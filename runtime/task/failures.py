"""Error policies for undecodable records, processor exceptions and refused outputs: fail, skip or dead-letter.

A dead letter is the input record with headers saying what went wrong, so it can be larger than the
input, and larger than the dead-letter topic takes: it is then cut down to fit (value first, then key),
with a header giving the original sizes, rather than being refused and stopping the worker.

A processor may fail on every record, and then the policy runs as often as records come: a dead letter
goes into the output path's open batches as any output does, its stack trace is formatted once per path
through the code (`runtime/task/stack_traces.py`), and the log tells the first records of a burst and
then counts the rest per processor and cause (`runtime/summarised_log.py`).
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any, NamedTuple

from processors.errors import StopWorker
from runtime.config import AppConfig, ErrorPolicy
from runtime.counters import Counters
from runtime.errors import EngineError, StopAfterCommit, StopWithoutCommit
from runtime.kafka.aiokafka_internals import estimate_record_size
from runtime.kafka.outputs import Output, Outputs
from runtime.kafka.record_limits import (
    DEFAULT_MAX_REQUEST_SIZE,
    HeaderList,
    Limits,
    RecordRefused,
    broker_refusal,
    record_size,
)
from runtime.kafka.unparseable import UnparseableRecordError
from runtime.summarised_log import SummarisedLog
from runtime.task.stack_traces import stack_trace

log = logging.getLogger(__name__)


class Stage(StrEnum):
    DESERIALIZATION = "deserialization"
    PROCESSING = "processing"
    GLOBAL_STORE = "global-store update"


TRUNCATED = "error.truncated"
# The error headers cut last, and only when the record does not fit without its own headers.
_LONG_ERROR_HEADERS = ("error.stacktrace", "error.message")


class RecordFailed(StopAfterCommit):
    """A record failed under the `fail` policy: the worker stops without committing past it."""


class OutputRefused(StopWithoutCommit):
    """The broker refused an output or a dead letter after the input's offset moved on: the worker stops
    and commits nothing since its last commit, so the input is processed again when it restarts."""


class FailureHandler:
    """Applies the configured policy; a dead letter keeps the original bytes and says what went wrong."""

    def __init__(
        self,
        app_id: str,
        policies: dict[Stage, ErrorPolicy],
        dead_letter_topic: str,
        counters: Counters,
        dead_letter_max_bytes: int = DEFAULT_MAX_REQUEST_SIZE,
    ):
        self._app_id = app_id
        self._policies = policies
        self._dead_letter_topic = dead_letter_topic
        self._counters = counters
        self._dead_letter_max_bytes = dead_letter_max_bytes
        self._log = SummarisedLog(log, "failed records not logged one by one")
        self._causes: dict[tuple[Stage, str, type[BaseException], str], _Cause] = {}

    @classmethod
    def configured(cls, config: AppConfig, counters: Counters, limits: Limits) -> FailureHandler:
        """The app's policies for undecodable records and processing errors; dead letters cut to fit their topic."""
        policies = {Stage.DESERIALIZATION: config.errors.deserialization, Stage.PROCESSING: config.errors.processing}
        dead_letters = limits.get(config.dead_letter_topic)
        return cls(
            config.app_id,
            policies,
            config.dead_letter_topic,
            counters,
            *([dead_letters.max_bytes] if dead_letters is not None else []),
        )

    def stops_on(self, stage: Stage, error: BaseException) -> bool:
        """Whether `error` at `stage` stops the worker: under the `fail` policy, and under every policy when it
        is the engine's (a processor sending to a topic not among its outputs, a schema registry out of reach)
        or the processor says so (`StopWorker`: a database that refused its connection)."""
        return isinstance(error, EngineError | StopWorker) or self._policies[stage] is ErrorPolicy.FAIL

    def summarise(self) -> None:
        """Tell the failures counted but not yet told (the worker stops)."""
        self._log.flush()

    def handle(self, stage: Stage, processor: str, raw: Any, error: BaseException, outputs: Outputs) -> None:
        if isinstance(error, EngineError):  # not the record's fault (a schema registry out of reach): no policy
            raise error
        if isinstance(error, StopWorker):  # not the record's fault either, and its message says it all
            raise RecordFailed(
                f"processor '{processor}' stopped at record {raw.topic}[{raw.partition}]@{raw.offset}: {error}"
            ) from error
        policy = self._policies[stage]
        if policy is ErrorPolicy.FAIL:
            raise RecordFailed(
                f"{stage} failed in processor '{processor}' for record {raw.topic}[{raw.partition}]@{raw.offset}: "
                f"{type(error).__name__}: {error}"
            ) from error
        if isinstance(error, UnparseableRecordError):
            raw = error.recovered  # the record as fetched cannot be read: this is what its bytes still hold
        cause = self._cause(stage, processor, error, raw.topic)
        if policy is ErrorPolicy.SKIP:
            self._counters.skipped += 1
            if self._log.tells(cause.skipped):
                log.warning(_TOLD, "skipped", raw.topic, raw.partition, raw.offset, stage, processor, error)
            return
        key, value, headers = fit_dead_letter(
            raw.key, raw.value, raw.headers, self._error_headers(cause, raw, error), self._dead_letter_max_bytes
        )
        outputs.append(self._dead_letter_topic, key, value, headers, timestamp_ms=raw.timestamp, processor=processor)
        self._counters.dead_lettered += 1
        if headers[-1][0] != TRUNCATED:
            if self._log.tells(cause.dead_lettered):
                log.warning(_TOLD, "dead-lettered", raw.topic, raw.partition, raw.offset, stage, processor, error)
        elif self._log.tells(cause.cut_down):
            cut_from = headers[-1][1].decode()
            what = ("dead-lettered", raw.topic, raw.partition, raw.offset, stage, processor, error, cut_from)
            log.warning(f"{_TOLD}, cut down to fit its topic (%s)", *what)

    def _cause(self, stage: Stage, processor: str, error: BaseException, topic: str) -> _Cause:
        """What a failure of this kind, in this processor, of a record of this topic has in common with the
        others: its kinds in the log's summary, and the dead letter's headers that name it."""
        error_type = type(error)
        cause = self._causes.get((stage, processor, error_type, topic))
        if cause is None:
            because = f"'{processor}' ({stage} failed: {error_type.__name__})"
            cause = self._causes[stage, processor, error_type, topic] = _Cause(
                f"dead-lettered in {because}",
                f"dead-lettered in {because}, cut down to fit",
                f"skipped in {because}",
                ("error.stage", stage.value.encode()),
                ("error.type", f"{error_type.__module__}.{error_type.__qualname__}".encode()),
                ("error.app", self._app_id.encode()),
                ("error.processor", processor.encode()),
                ("source.topic", topic.encode()),
            )
        return cause

    def refused(self, output: Output, error: Exception, outputs: Outputs) -> None:
        """The broker refused an output: its input record failed processing, after the fact."""
        topic, raw, processor = output.topic, output.source, output.processor
        size = record_size(output.key, output.value, output.headers)
        if raw is None or topic == self._dead_letter_topic:
            what = "a dead letter" if topic == self._dead_letter_topic else "a record"
            raise OutputRefused(
                f"the broker refused {what} for topic '{topic}' ({size:,} bytes): {type(error).__name__}: {error}"
            ) from error
        refusal = RecordRefused(broker_refusal(topic, output.key, output.value, output.headers, error))
        refusal.__cause__ = error  # the dead letter's stack trace shows the client's
        if self.stops_on(Stage.PROCESSING, refusal):
            raise OutputRefused(
                f"processing failed in processor '{processor}' for record {raw.topic}[{raw.partition}]@{raw.offset}: "
                f"{refusal}"
            ) from error
        self.handle(Stage.PROCESSING, processor, raw, refusal, outputs)

    @staticmethod
    def _error_headers(cause: _Cause, raw: Any, error: BaseException) -> list[tuple[str, bytes]]:
        return [
            cause.stage,
            cause.type,
            ("error.message", (str(error) or repr(error)).encode()),
            ("error.stacktrace", stack_trace(error).encode()),
            cause.app,
            cause.processor,
            cause.topic,
            ("source.partition", str(raw.partition).encode()),
            ("source.offset", str(raw.offset).encode()),
            ("source.timestamp", str(raw.timestamp).encode()),
        ]


_TOLD = "%s record %s[%d]@%d (%s failed in '%s'): %r"  # what was done, the record, and why


class _Cause(NamedTuple):
    """Encoded once for each stage, processor, error type and source topic."""

    dead_lettered: str
    cut_down: str
    skipped: str
    stage: tuple[str, bytes]
    type: tuple[str, bytes]
    app: tuple[str, bytes]
    processor: tuple[str, bytes]
    topic: tuple[str, bytes]


def fit_dead_letter(
    key: bytes | None,
    value: bytes | None,
    headers: HeaderList,
    error_headers: list[tuple[str, bytes]],
    max_bytes: int,
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """The dead letter's key, value and headers, cut down to `max_bytes` when they exceed it: the value
    first, then the key, then the input's own headers, then the error's stack trace and message. The
    error headers stay, and `error.truncated` gives the original sizes."""
    kept = [*headers, *error_headers] if headers else error_headers  # read only, from here on
    if estimate_record_size(key, value, kept) <= max_bytes:
        return key, value, kept
    original = sum(len(name.encode()) + len(data or b"") for name, data in headers)
    note = (TRUNCATED, f"key={_size(key)},value={_size(value)},headers={original}".encode())
    kept = [*kept, note]
    value = _cut(value, record_size(key, value, kept) - max_bytes)
    key = _cut(key, record_size(key, value, kept) - max_bytes)
    if record_size(key, value, kept) > max_bytes:
        kept = [*error_headers, note]
    for name in _LONG_ERROR_HEADERS:
        over = record_size(key, value, kept) - max_bytes
        if over > 0:
            kept = [(header, _cut(data, over) or b"") if header == name else (header, data) for header, data in kept]
    return key, value, kept


def _cut(data: bytes | None, over: int) -> bytes | None:
    """`data` without its last `over` bytes (None stays None)."""
    if data is None or over <= 0:
        return data
    return data[: max(0, len(data) - over)]


def _size(data: bytes | None) -> str:
    return "null" if data is None else str(len(data))
