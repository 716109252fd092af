"""Stores of each kind as a task opens them from the app YAML, and as its processor reaches them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.state.task_state import TaskState
from runtime.task.context import TaskContext
from stores import SessionView, WindowView
from stores.layout import window_entry
from tests.support.engine_fakes import FakeOutputs

pytestmark = pytest.mark.anyio


def app_with_stores(state_dir: Path) -> dict[str, Any]:
    return {
        "app_id": "kinds",
        "topics": {"in": {}},
        "processors": [{
            "name": "p", "class": "processors:Processor", "inputs": ["in"],
            "stores": {
                "counts": {"backend": "memory"},
                "per-minute": {"kind": "window", "retention_ms": 120_000, "key_serde": "str", "backend": "memory"},
                "visits": {"kind": "session", "retention_ms": 1_800_000},
            },
        }],
        "state_dir": str(state_dir),
    }  # fmt: skip


async def opened(tmp_path: Path) -> tuple[TaskState, TaskContext]:
    config = parse_app(app_with_stores(tmp_path))
    state = TaskState(config, config.processors[0], 0, FakeOutputs().as_outputs())
    await state.open()
    context = TaskContext("kinds", "p", 0, {}, frozenset(), {}, {}, state)
    return state, context


async def test_each_kind_is_handed_out_by_its_own_accessor(tmp_path: Path) -> None:
    state, ctx = await opened(tmp_path)
    try:
        windows, sessions = ctx.window_store("per-minute"), ctx.session_store("visits")
        assert isinstance(windows, WindowView) and isinstance(sessions, SessionView)
        assert (windows.name, windows.retention_ms, sessions.retention_ms) == ("per-minute", 120_000, 1_800_000)
        ctx.store("counts").put("a", 1)
        windows.put("account-1", 60_000, {"sum": 5})
        # The window store's serdes are the YAML's; the store under it holds the layout's bytes.
        stored = state.stores["per-minute"].store
        assert stored.get(window_entry(b"account-1", 60_000)) == msgpack.packb({"sum": 5})
        with pytest.raises(TypeError, match=r"declares 'per-minute' as a window store, .*ctx\.window_store\("):
            ctx.store("per-minute")
        with pytest.raises(TypeError, match=r"declares 'counts' as a key_value store, which ctx\.store\('counts'\)"):
            ctx.window_store("counts")
        with pytest.raises(TypeError, match=r"ctx\.session_store\('per-minute'\): .* a window store"):
            ctx.session_store("per-minute")
        with pytest.raises(KeyError, match="declares no store 'hourly'"):
            ctx.window_store("hourly")
    finally:
        state.close()


async def test_an_aborted_transaction_takes_the_stream_time_back_with_the_windows(tmp_path: Path) -> None:
    state, ctx = await opened(tmp_path)
    try:
        windows = ctx.window_store("per-minute")
        windows.advance(60_000)
        windows.put("a", 0, 1)
        windows.write_stream_time()  # as the engine does at a commit
        state.stores["per-minute"].store.flush(1)  # committed
        windows.advance(300_000)  # expires window 0
        assert windows.get("a", 0) is None
        state.discard()
        assert (windows.stream_time, windows.get("a", 0)) == (60_000, 1)
    finally:
        state.close()
