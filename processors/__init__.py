"""The public processor API: subclass `Processor`, receive `Record`s, act through the `Context`."""

from processors.context import Context
from processors.errors import StopWorker
from processors.global_updater import GlobalStoreUpdater
from processors.merge import MergeProcessor
from processors.processor import Processor
from processors.record import Record
from processors.serdes import Serde
from processors.stores import KeyValueStore, ReadOnlyStore, SessionStore, Table, TtlStore, WindowStore

__all__ = [
    "Context",
    "GlobalStoreUpdater",
    "KeyValueStore",
    "MergeProcessor",
    "Processor",
    "ReadOnlyStore",
    "Record",
    "Serde",
    "SessionStore",
    "StopWorker",
    "Table",
    "TtlStore",
    "WindowStore",
]
