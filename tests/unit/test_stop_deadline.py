"""A stop's deadline: before the stop a step takes as long as it takes; once stopping, a step past the
deadline is named while it still shows what it does, cancelled, and the stop goes on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runtime.worker.stop_deadline import StopDeadline

pytestmark = pytest.mark.anyio


async def test_before_the_stop_a_step_is_not_bounded() -> None:
    deadline = StopDeadline(timeout_s=0.0)
    assert await deadline.bound(asyncio.sleep(0.05), lambda: "sleeping")
    assert deadline.abandoned == [] and not deadline.started.is_set()


async def test_a_step_that_ends_in_time_is_awaited_and_its_error_raised() -> None:
    deadline = StopDeadline(timeout_s=5.0)
    deadline.start()
    assert await deadline.bound(asyncio.sleep(0.01), lambda: "sleeping")

    async def fails() -> None:
        raise ValueError("broke")

    with pytest.raises(ValueError, match="broke"):
        await deadline.bound(fails(), lambda: "failing")
    assert deadline.abandoned == []


async def test_a_step_past_the_deadline_is_named_as_it_was_then_cancelled() -> None:
    deadline = StopDeadline(timeout_s=0.0)
    deadline.start()
    state = {"doing": "waiting for ever"}

    async def forever() -> None:
        try:
            await asyncio.sleep(10**6)
        finally:
            state["doing"] = "unwound"

    work = asyncio.ensure_future(forever())
    assert not await deadline.bound(work, lambda: state["doing"], final=False)
    assert work.cancelled() and state["doing"] == "unwound"
    assert deadline.abandoned == ["waiting for ever"]
    assert "abandoning waiting for ever" in deadline.report()


def test_a_second_signal_handled_while_the_first_ones_start_holds_the_events_lock_returns_at_once() -> None:
    deadline = StopDeadline(timeout_s=5.0)
    real_set = deadline.started.set

    def set_interrupted() -> None:
        # Inside Event.set, its lock held, a second SIGTERM's handler runs on the same thread.
        with deadline.started._cond:  # type: ignore[attr-defined]
            deadline.start()
        real_set()

    deadline.started.set = set_interrupted  # type: ignore[method-assign]
    first = threading.Thread(target=deadline.start, daemon=True)
    first.start()
    first.join(2)
    assert not first.is_alive(), "the second start waited for the lock the first one held"
    assert deadline.started.is_set()
