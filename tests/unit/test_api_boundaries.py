"""The public API (`processors`) stands on its own: it imports nothing of the engine, and the engine's
stores are what its store interfaces describe."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import processors
from processors import Context
from stores import BufferedKeyValueStore, MemoryBackend, ReadOnlyView, SessionView, WindowView
from stores.serdes import BytesSerde

PROCESSORS = Path(processors.__file__).parent
ENGINE = ("runtime", "stores")
# What the engine's utilities need, and a processor does not: none of it may come with the API.
ENGINE_LIBRARIES = ("aiokafka", "cavro", "msgpack", "msgspec", "orjson", "rocksdict")


def test_importing_the_api_loads_nothing_of_the_engine() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, processors; print('\\n'.join(sys.modules))"],
        capture_output=True, text=True, check=True, cwd=PROCESSORS.parent,
    ).stdout.split()  # fmt: skip
    assert "processors" in loaded
    assert [name for name in loaded if name.split(".")[0] in ENGINE + ENGINE_LIBRARIES] == []


def test_no_api_module_names_the_engine_even_for_type_checking() -> None:
    named: list[str] = []
    for path in sorted(PROCESSORS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                modules = [node.module]
            named += [f"{path.name}: {module}" for module in modules if module.split(".")[0] in ENGINE]
    assert named == []


def test_the_context_hands_out_the_apis_stores_which_the_engines_are() -> None:
    assert get_type_hints(Context.store)["return"] is processors.KeyValueStore
    assert get_type_hints(Context.global_store)["return"] is processors.ReadOnlyStore
    # The annotations are the proof that the engine's classes are such stores (mypy checks them
    # against the protocols); the calls show the interfaces' methods reach the store.
    store: processors.KeyValueStore = BufferedKeyValueStore(MemoryBackend(), name="totals")
    view: processors.ReadOnlyStore = ReadOnlyView(BufferedKeyValueStore(MemoryBackend(), name="terminals"))
    read_side: processors.ReadOnlyStore = store
    store.put("a", 1)
    store.put("b", 2)
    store.delete("b")
    assert (store.name, store.get("a"), store.get("b", "none")) == ("totals", 1, "none")
    assert list(read_side.range("a", "z")) == list(read_side.prefix(b"")) == [("a", 1)]
    assert (view.name, view.get("a"), list(view.range()), view.approximate_count()) == ("terminals", None, [], 0)


def test_the_engines_window_and_session_stores_are_the_apis() -> None:
    def raw(name: str) -> BufferedKeyValueStore:
        return BufferedKeyValueStore(MemoryBackend(), BytesSerde(), BytesSerde(), name=name)

    windows: processors.WindowStore = WindowView(raw("per-minute"), 60_000)
    sessions: processors.SessionStore = SessionView(raw("visits"), 60_000)
    assert (windows.name, windows.retention_ms, windows.advance(120_000), windows.stream_time) == (
        "per-minute", 60_000, 120_000, 120_000
    )  # fmt: skip
    assert windows.put("a", 60_000, 1) and not windows.put("a", 0, 1)
    windows.put("a", 120_000, 2)
    windows.delete("a", 120_000)
    assert (windows.get("a", 60_000), list(windows.fetch("a", 0, 10**6)), list(windows.fetch_all(0, 10**6))) == (
        1, [(60_000, 1)], [("a", 60_000, 1)]
    )  # fmt: skip
    assert sessions.advance(50_000) == 50_000 and sessions.put("a", 0, 10, "x")
    assert (list(sessions.find("a", 0, 5)), list(sessions.fetch_all(0, 10))) == ([(0, 10, "x")], [("a", 0, 10, "x")])
    sessions.delete("a", 0, 10)
    assert list(sessions.fetch_all(0, 10)) == []
