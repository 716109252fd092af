"""Test an app's processors without a broker: `AppDriver` runs them on in-memory topics, with their
stores, error policies and punctuations, through the runtime's own task, output and store code."""

from runtime.errors import StopAfterCommit
from runtime.task.failures import RecordFailed
from runtime.testkit.driver import AppDriver
from runtime.testkit.records import DeadLetter, TopicRecord

__all__ = ["AppDriver", "DeadLetter", "RecordFailed", "StopAfterCommit", "TopicRecord"]
