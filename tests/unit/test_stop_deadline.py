"""A stop's deadline: before the stop a step takes as long as it takes; once stopping, a step past the
deadline is named while it still shows what it does, cancelled, and the stop goes on."""

from __future__ import annotations

import asyncio

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
