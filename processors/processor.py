"""The base class of user processors."""

from __future__ import annotations

from collections.abc import Awaitable

from processors.context import Context
from processors.record import Record


class Processor:
    """Processes the records of one task (processor x partition), one at a time and in order.

    `process` may be a plain method or an `async def`. One instance is made per task.
    """

    def init(self, ctx: Context) -> None:
        """Called once before the first record of the task."""

    def process(self, record: Record, ctx: Context) -> Awaitable[None] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement process(record, ctx)")

    def close(self) -> None:
        """Called once when the task stops (shutdown or partition revoked)."""
