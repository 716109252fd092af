"""Error policies for undecodable records and processor exceptions: fail, skip or dead-letter."""

from __future__ import annotations

import logging
import traceback
from enum import StrEnum
from typing import Any

from runtime.config import ErrorPolicy
from runtime.counters import Counters
from runtime.errors import StopAfterCommit
from runtime.kafka.outputs import Outputs
from runtime.kafka.unparseable import UnparseableRecordError

log = logging.getLogger(__name__)


class Stage(StrEnum):
    DESERIALIZATION = "deserialization"
    PROCESSING = "processing"
    GLOBAL_STORE = "global-store update"


class RecordFailed(StopAfterCommit):
    """A record failed under the `fail` policy: the worker stops without committing past it."""


class FailureHandler:
    """Applies the configured policy; a dead letter keeps the original bytes and says what went wrong."""

    def __init__(
        self,
        app_id: str,
        policies: dict[Stage, ErrorPolicy],
        dead_letter_topic: str,
        counters: Counters,
    ):
        self._app_id = app_id
        self._policies = policies
        self._dead_letter_topic = dead_letter_topic
        self._counters = counters

    def stops_on(self, stage: Stage) -> bool:
        """Whether a failure at `stage` stops the worker (the `fail` policy)."""
        return self._policies[stage] is ErrorPolicy.FAIL

    def handle(self, stage: Stage, processor: str, raw: Any, error: BaseException, outputs: Outputs) -> None:
        where = f"{raw.topic}[{raw.partition}]@{raw.offset}"
        policy = self._policies[stage]
        if policy is ErrorPolicy.FAIL:
            raise RecordFailed(
                f"{stage} failed in processor '{processor}' for record {where}: {type(error).__name__}: {error}"
            ) from error
        if policy is ErrorPolicy.SKIP:
            self._counters.skipped += 1
            log.warning("skipped record %s (%s failed in '%s'): %r", where, stage, processor, error)
            return
        if isinstance(error, UnparseableRecordError):
            raw = error.recovered  # the record as fetched cannot be read: this is what its bytes still hold
        outputs.append(
            self._dead_letter_topic,
            raw.key,
            raw.value,
            headers=[*raw.headers, *self.error_headers(stage, processor, raw, error)],
            timestamp_ms=raw.timestamp,
        )
        self._counters.dead_lettered += 1
        log.warning("dead-lettered record %s (%s failed in '%s'): %r", where, stage, processor, error)

    def error_headers(self, stage: Stage, processor: str, raw: Any, error: BaseException) -> list[tuple[str, bytes]]:
        error_type = type(error)
        stack = "".join(traceback.format_exception(error))
        return [
            ("error.stage", stage.value.encode()),
            ("error.type", f"{error_type.__module__}.{error_type.__qualname__}".encode()),
            ("error.message", (str(error) or repr(error)).encode()),
            ("error.stacktrace", stack.encode()),
            ("error.app", self._app_id.encode()),
            ("error.processor", processor.encode()),
            ("source.topic", raw.topic.encode()),
            ("source.partition", str(raw.partition).encode()),
            ("source.offset", str(raw.offset).encode()),
            ("source.timestamp", str(raw.timestamp).encode()),
        ]
