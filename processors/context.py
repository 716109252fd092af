"""What a processor can do besides computing: send records, read its params, schedule punctuations."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from processors.stores import KeyValueStore, ReadOnlyStore, SessionStore, Table, WindowStore

Punctuation = Callable[[], Awaitable[None] | None]
PunctuationTime = Literal["wall_clock", "stream_time"]


class Context(ABC):
    """Handed to a processor's `init` and `process`; one per task (processor x partition)."""

    @property
    @abstractmethod
    def app_id(self) -> str: ...

    @property
    @abstractmethod
    def processor_name(self) -> str: ...

    @property
    @abstractmethod
    def partition(self) -> int:
        """The partition number of this task's inputs."""

    @property
    @abstractmethod
    def params(self) -> Mapping[str, Any]:
        """The processor's `params` from the app YAML."""

    @property
    @abstractmethod
    def stream_time(self) -> int:
        """The largest timestamp (epoch ms) among the records this task processed, the current one
        included; -1 before the first. A record older than it leaves it as it is. Records processed
        again after an aborted transaction see the stream time they saw the first time; a task that
        starts (after a restart, or on another worker) starts from -1. A task reading a repartition topic
        (`repartition:`) holds it at the least stream time of the tasks writing the topic (docs/joins.md,
        "Event time across the repartition topic"), so it may stay below the current record's."""

    @abstractmethod
    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Queue a record for one of the processor's outputs, encoded with the topic's serdes.

        The partition is Kafka's default: murmur2 of the encoded key, as a Java producer picks it. The
        timestamp (epoch ms) is `timestamp` when given, else the event time of the record being
        processed, so a downstream app sees the time the record is about; in a punctuation, the time
        it fired for (the stream time, or the wall clock's). A topic that is not among the processor's
        `outputs` is a mistake in the code or the YAML, not in the record: it stops the app, whatever
        the error policies.
        """

    @abstractmethod
    def store(self, name: str) -> KeyValueStore:
        """This task's instance of a store the processor declares under `stores:` in the app YAML."""

    @abstractmethod
    def window_store(self, name: str) -> WindowStore:
        """This task's instance of a store the processor declares with `kind: window`."""

    @abstractmethod
    def session_store(self, name: str) -> SessionStore:
        """This task's instance of a store the processor declares with `kind: session`."""

    def table(self, name: str) -> Table:
        """A table of the processor (`tables:` in the YAML): its compacted topic's partition of this task,
        as of the record being processed (the task takes the table's records and its inputs' in
        timestamp order), read-only; with `history_ms`, also as of any time in its history
        (`get_as_of`). (Not abstract, so that a context written before tables existed still stands.)"""
        raise NotImplementedError(f"{type(self).__name__} has no tables")

    @abstractmethod
    def global_store(self, name: str) -> ReadOnlyStore:
        """A global store of the app (`global_stores:` in the YAML): the whole table, on every task, read-only."""

    @abstractmethod
    def schedule(self, every_ms: int, callback: Punctuation, time: PunctuationTime = "wall_clock") -> None:
        """Call `callback` every `every_ms`, between records, never concurrently.

        `wall_clock`: every `every_ms` of real time, whether records come or not. `stream_time`: when
        `stream_time` reaches a multiple of `every_ms`, after the record that brought it there (so,
        scheduled in `init`, first after the task's first record, as in Kafka Streams); a jump over
        several multiples calls it once, and it is not called while stream time stands still.
        """

    @abstractmethod
    def count(self, name: str, amount: int = 1) -> None:
        """Add `amount` to the processor's counter `name`, which the worker's metrics report
        (`kafka_actor.processor.count`) with the processor's name. It counts what was processed, so
        records processed again after a crash or an aborted transaction count again."""
