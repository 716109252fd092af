"""The fields a log line carries beside its message, for a log pipeline to search by: the app, the worker,
the task and partition whose actor logged it, and the trace of the record being processed.

The task is a context variable its actor sets once: an asyncio task runs in a copy of the context it
was created in, so whatever an actor logs (its restore, its processor's lines, its failures) carries
it, and nothing else does. The trace is the current span's, which is the record's while `process()` runs.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Final, Literal, get_args

from opentelemetry import trace

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = get_args(LogFormat)

CURRENT_TASK: ContextVar[tuple[str, int] | None] = ContextVar("current_task", default=None)  # (task id, partition)


class LogFields(logging.Filter):
    """Adds the fields to every record it passes; `app` and `worker` are known once the YAML is read."""

    def __init__(self) -> None:
        super().__init__()
        self.app: str | None = None
        self.worker: int | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self.app is not None:
            record.app = self.app
        if self.worker is not None:
            record.worker = self.worker
        task = CURRENT_TASK.get()
        if task is not None:
            record.task, record.partition = task
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = trace.format_trace_id(span.trace_id)
            record.span_id = trace.format_span_id(span.span_id)
        return True


LOG_FIELDS = LogFields()
