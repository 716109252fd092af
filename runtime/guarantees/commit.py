"""The commit protocol, written once for every guarantee.

A commit makes a task's progress durable: what its processor wrote elsewhere, its outputs, its
stores' changes, and the input offsets all of that covers. It runs in these steps (the numbers
appear as comments where each step is done):

1. Prepare, for each task in its turn, so that none of its records is processed meanwhile
   (`Task.prepare_commit`):
   1.0 a processor with concurrency: wait until none of the task's records is in flight
       (runtime/task/in_flight.py), so that its offsets cover exactly what its records did; a task that
       leaves waits up to the shutdown timeout, then takes no part in the commit;
   1.1 await the processor's `flush(ctx)`: a sink writes what it buffered. If it raises, the task
       takes no part in this commit: none of its offsets are committed, and the processing error
       policy decides (`fail` stops the worker; `skip` and `dead_letter` try again next time);
   1.2 release the outputs its records (and its flush) sent to the task's output path;
   1.3 turn its stores' changes since the last commit into changelog records on the same path (its
       positions in its broadcast inputs among them: runtime/task/broadcast.py);
   1.4 take its offsets: after the last record it processed, of each input the group gave it.
2. Commit, by the guarantee's committer (one per guarantee, each in its own module):
   - at-least-once (`consumer_commits.py`): hand every batch to the producer, wait until the broker
     acknowledged them all, then commit the offsets through the consumer. The tasks go on
     processing meanwhile: outputs released after 1.4 belong to later offsets.
   - at-most-once: as at-least-once, but its offsets were committed before each batch was processed;
   - exactly-once (`worker_transaction.py`): with every task of the worker waiting in its turn, wait
     until the broker acknowledged the worker's transactional producer's batches, add every task's
     offsets to the transaction, with the group's generation, and commit it; a transaction that fails
     is aborted and every task's work redone from the offsets committed before (when the broker refused
     an output, with that record's input going to the processing policy). On a broker without KIP-447
     (`transactions.py`), each task does the same with a transactional producer of its own.
3. Post-commit, for each task whose commit succeeded, whatever the guarantee: the task keeps the stream
   time of the commit and forgets the broker's refusals of records below its offsets (`Task.committed`);
   its stores write their data together with the changelog offset it reaches (`TaskState.flush`), so a
   store is never ahead of its changelog.
4. Checkpoint, for each task whose commit succeeded or that had nothing new to commit, when one is due
   and it has no part in it yet: its stores' state as step 3 left it, with the input offsets of step
   1.4 (runtime/guarantees/store_checkpoints.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from runtime.task.commits import CommitBeforeProcessing, TaskCommit

if TYPE_CHECKING:
    from runtime.guarantees.store_checkpoints import StoreCheckpoints
    from runtime.kafka.outputs import Outputs
    from runtime.task.task import Task, TaskId


@dataclass
class Committed:
    """What step 2 achieved: the tasks' commits now durable, those with nothing new since the last commit
    (exactly-once commits none for them), and the tasks another worker took over."""

    durable: list[TaskCommit] = field(default_factory=list)
    unchanged: list[TaskCommit] = field(default_factory=list)
    lost: list[Task] = field(default_factory=list)


class Committer(Protocol):
    """Step 2 of the protocol for one guarantee, and the guarantee's part when a task comes and goes."""

    commits_in_turn: bool
    """Whether the tasks wait until step 2 is done (exactly-once) or go on processing (the others)."""

    commit_before_processing: CommitBeforeProcessing | None
    """At-most-once commits a batch's offsets before the batch is processed; the others, None."""

    commits_together: bool
    """Whether one commit holds every task of the worker (exactly-once with one transaction per worker): each
    commit then waits for every running task's turn, whichever tasks it was asked for."""

    def outputs_for(self, task_id: TaskId) -> Outputs:
        """Where a new task's outputs go: the worker's shared producer, or (exactly-once) a producer of the
        task's own, which the committer owns: it starts it at the claim and stops it at the release."""

    async def claim(self, task: Task) -> None:
        """A task was assigned and has not restored yet: exactly-once fences its previous owner and
        moves the task to the offsets that owner committed last."""

    async def commit(self, task_commits: list[TaskCommit]) -> Committed: ...

    async def release(self, task: Task) -> None:
        """A task leaves, after its final commit or without one: what is still open is aborted."""


class CommitCycle:
    """Runs the protocol over a worker's tasks: on a timer, when partitions are revoked, at shutdown."""

    def __init__(self, committer: Committer, interval_s: float, store_checkpoints: StoreCheckpoints | None = None):
        self.committer = committer
        self.store_checkpoints = store_checkpoints
        self._interval_s = interval_s
        self._one_at_a_time = asyncio.Lock()  # the timer, a revoke and the shutdown take turns
        self._wake_timer = asyncio.Event()
        self._timer_stopped = False
        self._every_task: Callable[[], Iterable[Task]] = tuple

    async def commit(self, tasks: Iterable[Task], final: bool = False) -> None:
        """Commit the running tasks, each as soon as its current record is done. A task whose processor's
        flush failed (step 1.1) does not hold the others back: they commit, then its failure is raised.

        With `final`, the tasks leave after it, and no later commit takes them, though they close later: a
        timer's commit between the two would take them again, and (not committing in turn) flush their
        stores in its step 3 after they closed."""
        given = list(tasks)
        async with self._one_at_a_time:
            try:
                await self._commit(given)
            finally:
                if final:
                    for task in given:
                        await task.leave_commits()  # no commit holds a turn now: at once

    async def _commit(self, tasks: list[Task]) -> None:
        if self.committer.commits_together:
            await self._commit_together([*dict.fromkeys([*tasks, *self._every_task()])])
            return
        running = [task for task in tasks if task.running]
        outcomes: list[TaskCommit | BaseException | None]
        if self.committer.commits_in_turn:
            outcomes = await asyncio.gather(*map(self._commit_in_turn, running), return_exceptions=True)
        else:
            outcomes = await asyncio.gather(*map(self._prepare_in_turn, running), return_exceptions=True)
            prepared = [outcome for outcome in outcomes if isinstance(outcome, TaskCommit)]
            self._post_commit(await self.committer.commit(prepared))  # 2, 3
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _prepare_in_turn(self, task: Task) -> TaskCommit | None:
        async with task.commit_turn():
            return await task.prepare_commit()  # 1

    async def _commit_in_turn(self, task: Task) -> None:
        async with task.commit_turn():
            task_commit = await task.prepare_commit()  # 1
            if task_commit is not None:
                self._post_commit(await self.committer.commit([task_commit]))  # 2, 3

    async def _commit_together(self, tasks: list[Task]) -> None:
        """Every running task in its turn at once, then one commit. A task that takes no part (its processor's
        flush failed) holds the others back: its outputs so far share their transaction, which cannot commit
        without its offsets, so nothing is committed and the transaction stays open until the next commit."""
        async with contextlib.AsyncExitStack() as turns:
            # Every task's turn, not only the running ones': a task that starts running meanwhile would write
            # into the transaction between its commit and the next one's begin. All asked for at once, so that
            # each task stops after its current record: asked for one after the other, the tasks held already
            # would wait while those not asked yet went on with their batches, one after the other.
            await asyncio.gather(*(turns.enter_async_context(task.commit_turn()) for task in tasks))
            running = [task for task in tasks if task.running]
            outcomes = await asyncio.gather(*(task.prepare_commit() for task in running), return_exceptions=True)  # 1
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            prepared = [outcome for outcome in outcomes if isinstance(outcome, TaskCommit)]
            if len(prepared) < len(running):  # a flush failed (1.1), or work in flight outlasted a stop (1.0)
                return
            self._post_commit(await self.committer.commit(prepared))  # 2, 3

    async def commit_periodically(self, tasks: Callable[[], Iterable[Task]]) -> None:
        """Until `stop_timer`; a commit comes before its time when `commit_soon` asks. Never cancelled: a
        transaction cut off between its commit and the next begin would leave its task with none open."""
        self._every_task = tasks
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_timer.wait(), self._interval_s)
            self._wake_timer.clear()
            if self._timer_stopped:
                return
            await self.commit(tasks())

    def commit_soon(self) -> None:
        """The stores hold too much until their commit (runtime/state/store_buffers.py): commit now."""
        self._wake_timer.set()

    def stop_timer(self) -> None:
        self._timer_stopped = True
        self._wake_timer.set()

    def _post_commit(self, committed: Committed) -> None:
        for task_commit in committed.durable:
            task = task_commit.task
            task.committed(task_commit.offsets)  # 3
            if task.state is not None:
                task.state.flush(task_commit.offsets)  # 3
        if self.store_checkpoints is not None:
            for task_commit in committed.durable + committed.unchanged:
                self.store_checkpoints.after_commit(task_commit.task, task_commit.offsets)  # 4
        for task in committed.lost:
            task.lose()
