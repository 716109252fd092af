"""The bound on what stores hold until their commit: the estimate of a store's buffer, the worker-wide
total that asks for a commit once, and the commit timer it wakes."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from runtime.guarantees.commit import CommitCycle, Committed
from runtime.state.store_buffers import StoreBuffers
from stores.memory import MemoryBackend
from stores.store import BufferedKeyValueStore


def test_the_estimate_of_a_buffer_is_near_what_it_takes() -> None:
    store = BufferedKeyValueStore(MemoryBackend(), changelog=True)
    tracemalloc.start()
    try:
        for n in range(50_000):
            store.put(f"user-{n:08d}", n)
        taken, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0.75 * taken <= store.buffered_bytes <= 1.25 * taken
    estimate = store.buffered_bytes
    store.put("user-00000001", 49_999)  # a key written again is still one entry
    assert store.buffered_bytes == estimate
    store.flush()
    assert store.buffered_bytes == 0


def test_the_total_past_the_bound_asks_for_one_commit_until_it_falls_back() -> None:
    asked: list[int] = []
    buffers = StoreBuffers(1000, lambda: asked.append(buffers.total_bytes))
    first, second = object(), object()
    buffers.hold(first, 600)
    buffers.hold(second, 300)
    assert asked == []
    buffers.hold(second, 500)
    assert asked == [1100]
    buffers.hold(first, 900)
    assert asked == [1100], "one full buffer asks once"
    buffers.hold(first, 0)  # its commit wrote it out
    assert buffers.total_bytes == 500
    buffers.hold(first, 700)
    assert asked == [1100, 1200], "below the bound again, then past it: asks again"


class NoCommits:
    commits_in_turn = False
    commits_together = False
    commit_before_processing = None

    async def commit(self, task_commits: list[object]) -> Committed:
        return Committed()


@pytest.mark.anyio
async def test_commit_soon_wakes_the_timer_before_its_interval() -> None:
    commit_cycle = CommitCycle(NoCommits(), interval_s=600)  # type: ignore[arg-type]
    rounds: list[float] = []

    def tasks() -> list[object]:
        rounds.append(asyncio.get_running_loop().time())
        return []

    timer = asyncio.create_task(commit_cycle.commit_periodically(tasks))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert rounds == []
    commit_cycle.commit_soon()
    await asyncio.sleep(0.05)
    assert len(rounds) == 1
    commit_cycle.stop_timer()
    await asyncio.wait_for(timer, 1)
    assert len(rounds) == 1, "stopping commits nothing more"
