"""Error policies for undecodable records, processor exceptions and refused outputs: fail, skip or dead-letter.

A dead letter is the input record with headers saying what went wrong, so it can be larger than the
input, and larger than the dead-letter topic takes: it is then cut down to fit (value first, then key),
with a header giving the original sizes, rather than being refused and stopping the worker.

A processor may fail on every record, and then the policy runs as often as records come: a dead letter's
headers are encoded as they come, those its cause shares once (`runtime/kafka/encoded_batch.py`), and it goes
into a batch the output path encodes itself; its stack trace is formatted once per path
through the code (`runtime/task/stack_traces.py`), and the log tells the first records of a burst and
then counts the rest per processor and cause (`runtime/summarised_log.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from processors.errors import StopWorker
from runtime.config import AppConfig, ErrorPolicy
from runtime.counters import Counters
from runtime.errors import EngineError, StopAfterCommit, StopWithoutCommit
from runtime.kafka.aiokafka_internals import estimate_record_size
from runtime.kafka.encoded_batch import EncodedHeaders, encoded_field, encoded_header, varint
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
from runtime.task.stack_traces import UNPRINTABLE, stack_trace

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
        self._routes: dict[tuple[Stage, str], FailureRoute] = {}

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
        return isinstance(error, _NOT_THE_RECORDS) or self._policies[stage] is ErrorPolicy.FAIL

    def summarise(self) -> None:
        """Tell the failures counted but not yet told (the worker stops)."""
        self._log.flush()

    def route(self, stage: Stage, processor: str) -> FailureRoute:
        """The policy for failures at `stage` in `processor`, which a task keeps for its records."""
        route = self._routes.get((stage, processor))
        if route is None:
            route = self._routes[stage, processor] = FailureRoute(
                stage,
                processor,
                self._policies[stage],
                self._app_id,
                self._dead_letter_topic,
                self._dead_letter_max_bytes,
                self._counters,
                self._log,
            )
        return route

    def handle(self, stage: Stage, processor: str, raw: Any, error: BaseException, outputs: Outputs) -> None:
        self.route(stage, processor).handle(raw, error, outputs)

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


class FailureRoute:
    """The policy for the failures of one stage in one processor, with what their dead letters share
    encoded once (`_Cause`): a processor failing on every record runs `handle` once a record, so it looks
    nothing up by the stage or the processor, and checks the dead letter's size against a bound it adds up
    from lengths, measuring it only when the bound is past the topic's limit."""

    def __init__(
        self,
        stage: Stage,
        processor: str,
        policy: ErrorPolicy,
        app_id: str,
        dead_letter_topic: str,
        dead_letter_max_bytes: int,
        counters: Counters,
        summarised: SummarisedLog,
    ):
        self._stage, self._processor, self._policy, self._app_id = stage, processor, policy, app_id
        self._dead_letter_topic, self._max_bytes = dead_letter_topic, dead_letter_max_bytes
        self._counters, self._log = counters, summarised
        self._skips = policy is ErrorPolicy.SKIP
        self._causes: dict[tuple[type[BaseException], str], _Cause] = {}
        self._last: _Cause | None = None
        # The dead letters' headers of the numbers that repeat: a partition's, and the last timestamp's.
        self._partition_headers: dict[int, bytes] = {}
        self._timestamp: int | None = None
        self._timestamp_header = b""

    def handle(self, raw: Any, error: BaseException, outputs: Outputs) -> None:
        cause = self._last
        if cause is None or cause.error_type is not type(error) or cause.topic != raw.topic:
            cause = self._last = self._judged(raw, error)  # what a failure of this type is, found once
        if cause.unparseable:
            raw = error.recovered  # type: ignore[attr-defined]  # what the bytes of a record fetched unread hold
        if self._skips:
            self._counters.skipped += 1
            if self._log.tells(cause.skipped):
                log.warning(_TOLD, "skipped", raw.topic, raw.partition, raw.offset, self._stage, self._processor, error)
            return
        # The dead letter, here rather than in a method of its own: this runs once a record.
        key, value, partition, timestamp = raw.key, raw.value, raw.partition, raw.timestamp
        try:
            text = str(error).encode()  # error_text, without its frame
        except Exception:
            text = UNPRINTABLE.encode()
        message = text or repr(error).encode()
        trace = stack_trace(error, text)
        partition_header = self._partition_headers.get(partition)
        if partition_header is None:
            partition_header = encoded_header("source.partition", b"%d" % partition)
            self._partition_headers[partition] = partition_header
        if timestamp != self._timestamp:  # the records of a burst often share their millisecond
            self._timestamp, self._timestamp_header = timestamp, encoded_header("source.timestamp", b"%d" % timestamp)
        offset = b"%d" % raw.offset
        encoded = EncodedHeaders(
            b"".join(
                (
                    cause.headers_before_message,
                    varint(len(message)),
                    message,
                    _STACK_TRACE_NAME,
                    varint(len(trace)),
                    trace,
                    cause.headers_after_stack_trace,
                    partition_header,
                    _OFFSET_NAME_AND_LENGTH[len(offset)],
                    offset,
                    self._timestamp_header,
                )
            )
        )
        bound = _OVERHEAD_AT_MOST + len(encoded.section) + len(key or b"") + len(value or b"")
        cut = False
        if not raw.headers and bound <= self._max_bytes:
            outputs.append_encoded(self._dead_letter_topic, key, value, encoded, timestamp, self._processor)
        else:
            key, value, fitted = fit_dead_letter(key, value, raw.headers, encoded.decoded(), self._max_bytes)
            cut = fitted[-1][0] == TRUNCATED
            outputs.append(self._dead_letter_topic, key, value, fitted, None, timestamp, None, self._processor)
        self._counters.dead_lettered += 1
        if not cut:
            if self._log.tells(cause.dead_lettered):
                log.warning(
                    _TOLD, "dead-lettered", raw.topic, raw.partition, raw.offset, self._stage, self._processor, error
                )
        elif self._log.tells(cause.cut_down):
            cut_from = fitted[-1][1].decode()
            what = (
                "dead-lettered",
                raw.topic,
                raw.partition,
                raw.offset,
                self._stage,
                self._processor,
                error,
                cut_from,
            )
            log.warning(f"{_TOLD}, cut down to fit its topic (%s)", *what)

    def _judged(self, raw: Any, error: BaseException) -> _Cause:
        """The cause `error` is of, once it is known that the policy applies to it: the checks depend on the
        error's type only, so a route's failures of the type it saw last skip them."""
        if isinstance(error, _NOT_THE_RECORDS):  # no policy
            if isinstance(error, StopWorker):  # its message says it all
                raise RecordFailed(
                    f"processor '{self._processor}' stopped at record {raw.topic}[{raw.partition}]@{raw.offset}: "
                    f"{error}"
                ) from error
            raise error  # the engine's (a schema registry out of reach)
        if self._policy is ErrorPolicy.FAIL:
            raise RecordFailed(
                f"{self._stage} failed in processor '{self._processor}' for record "
                f"{raw.topic}[{raw.partition}]@{raw.offset}: {type(error).__name__}: {error}"
            ) from error
        return self._cause(type(error), raw.topic)

    def _cause(self, error_type: type[BaseException], topic: str) -> _Cause:
        """What a failure of this kind, of a record of this topic, has in common with the others: its kinds in
        the log's summary, and the dead letter's headers that name it."""
        cause = self._causes.get((error_type, topic))
        if cause is None:
            because = f"'{self._processor}' ({self._stage} failed: {error_type.__name__})"
            shared = (
                ("error.stage", self._stage.value.encode()),
                ("error.type", f"{error_type.__module__}.{error_type.__qualname__}".encode()),
                ("error.app", self._app_id.encode()),
                ("error.processor", self._processor.encode()),
                ("source.topic", topic.encode()),
            )
            cause = self._causes[error_type, topic] = _Cause(
                error_type,
                topic,
                issubclass(error_type, UnparseableRecordError),
                f"dead-lettered in {because}",
                f"dead-lettered in {because}, cut down to fit",
                f"skipped in {because}",
                b"".join((varint(_HEADER_COUNT), *(encoded_header(*header) for header in shared[:2]), _MESSAGE_NAME)),
                b"".join(encoded_header(*header) for header in shared[2:]),
            )
        return cause


# A dead letter's headers after the input record's own: the five of its cause, the message, the stack trace, the
# source partition, offset and timestamp; and the names of those encoded as they come.
_HEADER_COUNT = 10
_MESSAGE_NAME, _STACK_TRACE_NAME = (encoded_field(name.encode()) for name in ("error.message", "error.stacktrace"))
# The offset's header up to its value, by the value's length (an offset has at most 20 digits).
_OFFSET_NAME_AND_LENGTH = [encoded_field(b"source.offset") + varint(length) for length in range(21)]
_NOT_THE_RECORDS = (EngineError, StopWorker)  # failures no error policy applies to
_TOLD = "%s record %s[%d]@%d (%s failed in '%s'): %r"  # what was done, the record, and why
# What a dead letter takes besides its key's, value's and encoded headers' bytes, at most: a record alone in its
# batch, with an empty key and value and no header (the header count is among the encoded headers), and the four
# bytes more that each of the key's and value's lengths may take.
_OVERHEAD_AT_MOST = estimate_record_size(b"", b"", []) - 1 + 2 * 4


@dataclass(frozen=True, slots=True)
class _Cause:
    """Encoded once for each stage, processor, error type and source topic."""

    error_type: type[BaseException]
    topic: str
    unparseable: bool
    """The record could not be parsed: its dead letter holds what the error recovered of it."""
    dead_lettered: str
    cut_down: str
    skipped: str
    headers_before_message: bytes
    """The dead letter's headers encoded (`EncodedHeaders`), up to the message's value: their count, the stage,
    the error's type, and the message's name."""
    headers_after_stack_trace: bytes
    """The app, the processor and the source topic, encoded."""


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
