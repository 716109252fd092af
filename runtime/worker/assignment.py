"""Which tasks this worker runs: built when partitions are assigned, committed and closed when revoked.

A task's whole life is one coroutine in the worker's task group (`_live`): the guarantee claims it
(exactly-once fences its previous owner and moves it to that owner's last committed offsets), its
stores are restored, its inputs are let through, and its actor runs until it is stopped. Leaving is
the reverse, in `_leave`: after a final commit, the guarantee releases the task (exactly-once aborts
what is still open and stops the task's producer), then the processor and the stores close.

Under a cooperative rebalance (runtime/kafka/cooperative_coordinator.py) it is told only the partitions
that were added or taken away: the other tasks run on untouched, and `held` tells the group which
partitions still have a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any

from aiokafka import TopicPartition

from runtime.config import AppConfig, Guarantee, ProcessorConfig
from runtime.counters import Counters
from runtime.errors import StopAfterCommit, TaskLost
from runtime.guarantees.commit import CommitCycle
from runtime.kafka.cooperative_coordinator import HoldingListener
from runtime.kafka.outages import OUTAGES
from runtime.log_fields import CURRENT_TASK
from runtime.state.task_state import TaskState
from runtime.task.assembly import assemble_task
from runtime.task.task import Task, TaskId, TaskPhase, TaskServices
from runtime.worker.backpressure import Backpressure
from runtime.worker.outcome import Outcome
from runtime.worker.stop_deadline import UNWIND_S, StopDeadline

log = logging.getLogger(__name__)

STARTING = "starting"
LOST = "lost"

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class Assignment(HoldingListener):
    def __init__(
        self,
        config: AppConfig,
        services: TaskServices,
        restore: Callable[[TaskState], Awaitable[None]],
        commit_cycle: CommitCycle,
        backpressure: Backpressure,
        end_offsets: Mapping[TopicPartition, int] | None,
        outcome: Outcome,
        counters: Counters,
        spawn: Spawn,
        ready: asyncio.Event,
    ):
        self.tasks: dict[TaskId, Task] = {}
        self.subscribers: dict[TopicPartition, list[Task]] = defaultdict(list)
        self.ready = ready  # set at the first assignment
        self._config = config
        self._services = services
        self._restore = restore
        self._commit_cycle = commit_cycle
        self._backpressure = backpressure
        self._end_offsets = end_offsets
        self._outcome = outcome
        self._counters = counters
        self._spawn = spawn
        self._actors: dict[Task, asyncio.Task[None]] = {}
        # Partitions of a task taken over that a cooperative rebalance gave back before that task had left.
        self._handed_back: dict[TaskId, tuple[ProcessorConfig, list[TopicPartition]]] = {}
        self._leaving: set[TaskId] = set()  # tasks taken over, closing their stores

    # Called by aiokafka's group coordinator; an exception raised here would only be logged by it.

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        try:
            self._assign(set(assigned))
        except Exception as error:
            self._outcome.fail(error, "taking the assigned partitions")

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        try:
            await self._revoke(set(revoked))
        except Exception as error:
            self._outcome.fail(error, "giving back the revoked partitions")

    def held(self) -> set[TopicPartition]:
        """Under a cooperative rebalance, what this worker tells the group it still runs: a task taken over
        (its commit was refused) holds nothing, and the group hands its partitions out again."""
        return {tp for task in list(self.tasks.values()) if not task.lost for tp in task.inputs}

    async def stop_actors(self, deadline: StopDeadline) -> None:
        """The worker stops: every task's batch in flight has until the shutdown timeout to end; those
        still running then are named as abandoned and cancelled."""
        late = await self._stop(list(self.tasks.values()), deadline.left(final=False))
        deadline.abandoned += [task.describe() for task in late]
        await self._cancel(late)

    async def leave_all(self, commit: bool, deadline: StopDeadline) -> None:
        """Once the actors stopped: every task commits (when `commit`) and leaves, within the deadline."""
        tasks = list(self.tasks.values())
        if commit:
            await deadline.bound(self._final_commit(tasks), lambda: self.doing("the final commit"))
        await deadline.bound(self._leave_each(tasks), lambda: self.doing("closing the tasks"))
        self.tasks.clear()
        self.subscribers.clear()

    def doing(self, step: str) -> str:
        """A step of the stop in words, with the tasks it waits for inside a processor's step, else Kafka."""
        busy = [task.describe() for task in list(self.tasks.values()) if task.in_step is not None]
        unreachable = ", Kafka unreachable" if OUTAGES.since is not None else ""
        return f"{step} ({', '.join(busy) or 'waiting for Kafka'}{unreachable})"

    async def _leave_each(self, tasks: list[Task]) -> None:
        for task in tasks:
            await self._leave(task)

    def _assign(self, assigned: set[TopicPartition]) -> None:
        self._counters.assignments += 1
        self._backpressure.forget(assigned)  # a task taken over held them until now
        by_partition: dict[int, set[TopicPartition]] = defaultdict(set)
        for tp in assigned:
            by_partition[tp.partition].add(tp)
        started = []
        for spec in self._config.processors:
            for partition, tps in by_partition.items():
                # As the processor lists them, tables last: of records with equal timestamps, the first input's
                # go first.
                topics = dict.fromkeys([*spec.inputs, *spec.table_topics()])
                inputs = [tp for topic in topics for tp in tps if tp.topic == topic]
                task_id = TaskId(spec.name, partition)
                previous = self.tasks.get(task_id)
                leaving = task_id in self._leaving or (previous is not None and previous.lost)
                if inputs and leaving:  # started again once the lost one has left; nothing fetched until then
                    self._handed_back[task_id] = (spec, inputs)
                    self._backpressure.hold(inputs, (LOST, task_id))
                elif inputs and previous is None and not self._outcome.stopping:
                    self._start(self._build(spec, task_id, inputs))
                    started.append(str(task_id))
        if assigned or not self.ready.is_set():  # a cooperative rebalance that added nothing says nothing here
            log.info("assigned %d partitions, started tasks %s", len(assigned), started)
        self.ready.set()

    def _build(self, spec: ProcessorConfig, task_id: TaskId, inputs: list[TopicPartition]) -> Task:
        outputs = self._commit_cycle.committer.outputs_for(task_id)
        return assemble_task(self._config, spec, task_id, inputs, outputs, self._services, self._end_offsets)

    def _start(self, task: Task) -> None:
        if task.state is not None or self._config.guarantee is Guarantee.EXACTLY_ONCE:
            self._backpressure.hold(task.inputs, (STARTING, task.id))  # nothing queued before the claim and restore
        self.tasks[task.id] = task
        for tp in task.inputs:
            self.subscribers[tp].append(task)
        self._actors[task] = self._spawn(self._live(task), f"task {task.id}")

    async def _live(self, task: Task) -> None:
        CURRENT_TASK.set((str(task.id), task.id.partition))  # on every line this actor logs
        try:
            task.phase = TaskPhase.RESTORING
            await self._commit_cycle.committer.claim(task)
            if task.state is not None:
                await self._restore(task.state)
                task.state.started_at(task.next_offsets)
            self._backpressure.release(task.inputs, (STARTING, task.id))
            await task.run()
        except TaskLost:
            task.lose()
        except Exception as error:
            self._outcome.fail(error, f"task {task.id}")
            return
        if task.lost and self.tasks.get(task.id) is task:  # taken over: it leaves now, without a commit
            self._forget(task)
            self._leaving.add(task.id)
            try:
                await self._leave(task)
            finally:
                self._leaving.discard(task.id)
            self._start_handed_back(task.id)

    def _start_handed_back(self, task_id: TaskId) -> None:
        """A task whose partitions came back while it was leaving starts afresh, from the committed offsets,
        once the lost one has closed its stores."""
        handed_back = self._handed_back.pop(task_id, None)
        if handed_back is None or self._outcome.stopping:
            return
        spec, inputs = handed_back
        self._backpressure.release(inputs, (LOST, task_id))
        self._start(self._build(spec, task_id, inputs))
        log.info("started task %s again: its partitions came back while it was leaving", task_id)

    async def _revoke(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        self._counters.revocations += 1
        for task_id, (_, inputs) in list(self._handed_back.items()):
            if any(tp in revoked for tp in inputs):
                del self._handed_back[task_id]
        leaving = [task for task in self.tasks.values() if any(tp in revoked for tp in task.inputs)]
        timeout_s = self._config.shutdown_timeout_s
        late = await self._stop(leaving, timeout_s)
        for task in late:
            log.error("task %s did not finish its batch within %.0fs; cancelling it", task.id, timeout_s)
        await self._cancel(late)
        await self._final_commit(leaving)
        for task in leaving:
            self._forget(task)
            await self._leave(task)
        for tp in revoked:
            self.subscribers.pop(tp, None)
        self._backpressure.forget(revoked)
        log.info("revoked %d partitions, stopped tasks %s", len(revoked), [str(t.id) for t in leaving])

    async def _final_commit(self, tasks: list[Task]) -> None:
        try:
            await self._outcome.unless_abandoned(self._commit_cycle.commit(tasks, final=True))
        except Exception as error:
            self._outcome.fail(error, "the final commit")

    async def _stop(self, tasks: list[Task], timeout_s: float) -> dict[Task, asyncio.Task[None]]:
        """Stop the actors after the batch in flight; one that is still starting (restoring, or in its
        processor's `init`) has none, and is cancelled (a store keeps what its restore applied), as is every
        one when the failure abandons what waits on Kafka (a batch may wait on a deleted topic). The actors
        still running after `timeout_s`, by task, for the caller to name and cancel."""
        actors = {}
        for task in tasks:
            task.request_stop()
            actor = self._actors.pop(task, None)
            if actor is None:
                continue
            if not task.running or self._outcome.abandoning:
                actor.cancel()
            actors[task] = actor
        if not actors:
            return {}
        await asyncio.wait(actors.values(), timeout=timeout_s)
        return {task: actor for task, actor in actors.items() if not actor.done()}

    @staticmethod
    async def _cancel(late: dict[Task, asyncio.Task[None]]) -> None:
        for actor in late.values():
            actor.cancel()
        if late:
            await asyncio.wait(late.values(), timeout=UNWIND_S)

    async def _leave(self, task: Task) -> None:
        if task.phase is TaskPhase.CLOSED:  # a task taken over left as its actor ended
            return
        await self._outcome.unless_abandoned(task.leave_commits())
        try:
            await self._outcome.unless_abandoned(self._commit_cycle.committer.release(task))
        except Exception as error:
            self._outcome.fail(error, f"releasing task {task.id}")
        try:
            await task.close()
        except StopAfterCommit as error:
            self._outcome.fail(error)

    def _forget(self, task: Task) -> None:
        if self.tasks.get(task.id) is not task:
            return
        del self.tasks[task.id]
        self._actors.pop(task, None)
        for tp in task.inputs:
            self.subscribers[tp] = [t for t in self.subscribers.get(tp, []) if t is not task]
        if task.lost:  # its partitions go with the next rebalance; until then, nothing is fetched for it
            self._backpressure.hold(task.inputs, (LOST, task.id))
