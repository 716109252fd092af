"""A task's context for unit tests of window processors, without Kafka: the window and session stores the
processor's params need (the engine's, in memory), and what it sends and counts, kept for the test."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from processors import Context, Processor
from processors.context import Punctuation, PunctuationTime
from stores import TIME_VIEWS, BufferedKeyValueStore, MemoryBackend, ReadOnlyView, SessionView, WindowView
from stores.serdes import BytesSerde


class Sent(NamedTuple):
    topic: str
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | None = None


class WindowContext(Context):
    """`stores` are declared as in the YAML (`{name: {kind: window, retention_ms: ...}}`)."""

    def __init__(self, params: Mapping[str, Any], stores: Mapping[str, Mapping[str, Any]], name: str = "agg") -> None:
        self._name = name
        self._params = params
        self.sent: list[Sent] = []
        self.counts: Counter[str] = Counter()
        self.windows: dict[str, WindowView] = {}
        self.sessions: dict[str, SessionView] = {}
        self.scheduled: list[tuple[int, Punctuation, PunctuationTime]] = []  # never run: records move time here
        for store, spec in stores.items():
            underlying = BufferedKeyValueStore(MemoryBackend(), BytesSerde(), BytesSerde(), name=store)
            view = TIME_VIEWS[spec["kind"]](underlying, int(spec["retention_ms"]))
            if isinstance(view, WindowView):
                self.windows[store] = view
            else:
                self.sessions[store] = view

    @classmethod
    def of(cls, processor: type[Processor], params: Mapping[str, Any], name: str = "agg") -> WindowContext:
        """The context of a processor whose params say which stores it needs."""
        assert processor.Params is not None
        return cls(params, processor.stores_for(processor.Params.model_validate(params), name), name)

    @property
    def app_id(self) -> str:
        return "windows-test"

    @property
    def processor_name(self) -> str:
        return self._name

    @property
    def partition(self) -> int:
        return 0

    @property
    def params(self) -> Mapping[str, Any]:
        return self._params

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp: int | None = None,
    ) -> None:
        self.sent.append(Sent(topic, key, value, tuple(headers or ()), timestamp))

    def store(self, name: str) -> BufferedKeyValueStore:
        raise AssertionError("window processors keep no key-value store")

    def window_store(self, name: str) -> WindowView:
        return self.windows[name]

    def session_store(self, name: str) -> SessionView:
        return self.sessions[name]

    def global_store(self, name: str) -> ReadOnlyView:
        raise AssertionError("window processors read no global store")

    @property
    def stream_time(self) -> int:
        """Past every record: window processors keep their stream time in their stores, and read the task's
        only as what may hold theirs back (a repartition's upstream progress), which nothing does here."""
        return 1 << 63

    def schedule(self, every_ms: int, callback: Punctuation, time: PunctuationTime = "wall_clock") -> None:
        self.scheduled.append((every_ms, callback, time))

    def count(self, name: str, amount: int = 1) -> None:
        self.counts[name] += amount

    def taken(self, topic: str) -> list[Sent]:
        """The records sent to `topic` since the last call, which forgets them."""
        taken = [sent for sent in self.sent if sent.topic == topic]
        self.sent = [sent for sent in self.sent if sent.topic != topic]
        return taken
