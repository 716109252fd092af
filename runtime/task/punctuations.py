"""A task's punctuations: run between records, in the task's turn, when they fall due.

Wall-clock punctuations fall due on the task's clock, stream-time ones when the task's stream time
reaches their due time (the record loop runs them right after the record that brought them due; the
task's next step runs those the paths of merge processors and concurrency leave). A
punctuation's outputs are stamped with the time it fired for, unless it gives them one; a punctuation
that raises follows the processing policy, and nothing it sent escapes. A task with records in flight
(`runtime/task/in_flight.py`) waits until none is before it runs one, so a punctuation never runs while a
record is processed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from processors.context import Punctuation
from runtime.kafka.outputs import Outputs
from runtime.task.context import TaskContext
from runtime.task.failures import Stage
from runtime.task.in_flight import InFlight
from runtime.task.record_loop import settle

if TYPE_CHECKING:
    from runtime.task.task import TaskId, TaskServices

log = logging.getLogger(__name__)


class PunctuationFailed(Exception):
    """A punctuation raised `error` under the `fail` policy: the task stops, as for a failure of `init`."""

    def __init__(self, error: Exception):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


class Punctuations:
    def __init__(self, task: TaskId, context: TaskContext, services: TaskServices, outputs: Outputs):
        self._task = task
        self._context = context
        self._services = services
        self._outputs = outputs

    async def run_due(self, in_flight: InFlight | None) -> None:
        context, clock = self._context, self._services.clock
        now = clock.monotonic()
        if in_flight is not None and in_flight.count and context.punctuation_due(now):
            await in_flight.drain()
        for punctuator in context.punctuators:
            if punctuator.due <= now:
                punctuator.due = now + punctuator.every_s
                await self._run(punctuator.callback, clock.epoch_ms())
        await self.run_stream_time_due()

    async def run_stream_time_due(self) -> None:
        """The stream-time punctuations the task's stream time brought due (none of its records in flight)."""
        context = self._context
        stream_time = context.latest_timestamp
        for stream_punctuator in context.stream_time_punctuators:
            if stream_punctuator.due <= stream_time:
                stream_punctuator.schedule_after(stream_time)
                await self._run(stream_punctuator.callback, stream_time)

    async def _run(self, callback: Punctuation, fired_for: int) -> None:
        """Runs `callback`, its outputs stamped with `fired_for` unless it gives them a timestamp."""
        context = self._context
        pending = context.pending
        released = len(pending)
        context.output_time = fired_for
        try:
            await settle(callback())
        except Exception as error:  # nothing of a failed punctuation escapes
            del pending[released:]
            if self._services.failures.stops_on(Stage.PROCESSING, error):
                raise PunctuationFailed(error) from error
            self._services.counters.skipped += 1
            log.warning("a punctuation of task %s failed (%r); skipped", self._task, error)
        finally:
            context.output_time = None
        if pending:
            context.release_to(self._outputs)
