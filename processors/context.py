"""What a processor can do besides computing: send records, read its params, schedule punctuations."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from processors.stores import KeyValueStore, ReadOnlyStore, SessionStore, WindowStore

Punctuation = Callable[[], Awaitable[None] | None]


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

    @abstractmethod
    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        """Queue a record for one of the processor's outputs, encoded with the topic's serdes.

        The partition is Kafka's default: murmur2 of the encoded key, as a Java producer picks it.
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

    @abstractmethod
    def global_store(self, name: str) -> ReadOnlyStore:
        """A global store of the app (`global_stores:` in the YAML): the whole table, on every task, read-only."""

    @abstractmethod
    def schedule(self, every_ms: int, callback: Punctuation) -> None:
        """Call `callback` every `every_ms` of wall-clock time, between records, never concurrently."""

    @abstractmethod
    def count(self, name: str, amount: int = 1) -> None:
        """Add `amount` to the processor's counter `name`, which the worker's metrics report
        (`kafka_actor.processor.count`) with the processor's name. It counts what was processed, so
        records processed again after a crash or an aborted transaction count again."""
