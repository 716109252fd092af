"""The base class of user processors."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from processors.context import Context
from processors.record import Record

if TYPE_CHECKING:
    from pydantic import BaseModel


class Processor:
    """Processes the records of one task (processor x partition), one at a time and in order.

    One instance is made per task, and it lives through these steps:

    1. Constructed with no arguments when the partition is assigned.
    2. `init(ctx)`, once, after the task's stores are restored and before its first record.
    3. `process(record, ctx)` for each record, in offset order; with several inputs, in timestamp
       order across them (each input's records still in offset order), or in the order a
       `MergeProcessor` chooses. Punctuations, on the wall clock or on stream time (`ctx.schedule`),
       run between records.
    4. `flush(ctx)` at every commit, before the offsets of the records processed so far are
       committed (inside the transaction under exactly-once). A sink writes what it buffered here:
       once `flush` returns, those records are never processed again. If it raises, none of the
       task's offsets are committed, and the processing error policy decides: `fail` stops the
       worker, `skip` and `dead_letter` log it and try again at the next commit.
    5. `close()`, once, when the task stops (revoked or shut down), after a last `flush`; only if
       `init` returned (a task stopped while `init` still awaits has it cancelled, and no `close`).

    Every one of these may be a plain method or an `async def`. An exception in the constructor,
    `init` or `close` is logged with its cause and stops the worker with exit 1 under every policy:
    a processor that cannot start has no record to skip, and one that cannot close may not have
    released what it holds.

    A processor may declare its `params` as a pydantic model, `Params`: the app YAML's `params` are then
    validated against it when the app is loaded, a mistake reported with its path in the YAML
    (`processors[0].params.window.size_ms: ...`) and exit 2 before anything connects. The validation
    context holds the processor's `name`, `inputs`, `broadcast`, `outputs` and the names of its
    `tables`, for checks against them. `ctx.params`
    stays the mapping from the YAML; `self.Params.model_validate(ctx.params)` in `init` gives the model.
    """

    Params: ClassVar[type[BaseModel] | None] = None

    @classmethod
    def stores_for(cls, params: Any, name: str) -> Mapping[str, Mapping[str, Any]]:
        """The stores the processor needs, given its validated `params` (a `Params`) and its name, as they
        would be declared under `stores:` in the YAML, which need not declare them then. A declaration
        there of the same store adds settings (a backend, serdes); it may not change the `kind`, nor
        shorten the `retention_ms`."""
        return {}

    def init(self, ctx: Context) -> Awaitable[None] | None:
        """Called once before the first record of the task."""

    def process(self, record: Record, ctx: Context) -> Awaitable[None] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement process(record, ctx)")

    def flush(self, ctx: Context) -> Awaitable[None] | None:
        """Called at every commit, before the offsets are committed; make buffered writes durable."""

    def close(self) -> Awaitable[None] | None:
        """Called once when the task stops (shutdown or partition revoked), after a last `flush`."""
