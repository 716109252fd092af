"""A task's part in a commit (runtime/guarantees/commit.py numbers the steps)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition

if TYPE_CHECKING:
    from runtime.task.task import Task


@dataclass(frozen=True)
class TaskCommit:
    """What one commit covers of a task: the next offset of each input (step 1.4)."""

    task: Task
    offsets: dict[TopicPartition, int]


CommitBeforeProcessing = Callable[[TopicPartition, list[Any]], Awaitable[None]]
