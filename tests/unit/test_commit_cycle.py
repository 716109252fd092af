"""The commit protocol (`CommitCycle`) over real tasks, with a committer that records step 2."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from aiokafka import TopicPartition

from processors.context import Context
from processors.processor import Processor
from processors.record import Record
from runtime.config import ErrorPolicy
from runtime.errors import StopAfterCommit
from runtime.guarantees.commit import CommitCycle, Committed
from runtime.kafka.outputs import Outputs
from runtime.task.commits import CommitBeforeProcessing, TaskCommit
from runtime.task.task import Task, TaskId, TaskPhase
from tests.support.engine_fakes import IN, OUT, FakeOutputs, FakeState, Log, make_services, make_task, raw, until_idle

pytestmark = pytest.mark.anyio

TP = TopicPartition(IN, 0)


class Sink(Processor):
    """Logs its flushes (step 1.1) and its records; its flush raises while `failing`."""

    def __init__(self, name: str, log: Log):
        self.name = name
        self.log = log
        self.failing = False

    def process(self, record: Record, ctx: Context) -> None:
        self.log.append(f"{self.name} process {record.offset}")
        ctx.send(OUT, record.value)

    def flush(self, ctx: Context) -> Awaitable[None] | None:
        self.log.append(f"{self.name} flush")
        if self.failing:
            raise OSError(f"{self.name} cannot write")
        return None


class RecordingCommitter:
    """Step 2: logs each commit with the tasks it covers; `lost` tasks come back as taken over, and
    `gate`, when set, holds the commit until the test opens it."""

    commit_before_processing: CommitBeforeProcessing | None = None

    def __init__(self, log: Log, commits_in_turn: bool):
        self.commits_in_turn = commits_in_turn
        self.commits_together = False
        self.log = log
        self.task_commits: list[list[TaskCommit]] = []
        self.lost: set[str] = set()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    def outputs_for(self, task_id: TaskId) -> Outputs:
        return FakeOutputs().as_outputs()

    async def claim(self, task: Task) -> None:
        return None

    async def release(self, task: Task) -> None:
        return None

    async def commit(self, task_commits: list[TaskCommit]) -> Committed:
        names = ",".join(str(c.task.id.processor) for c in task_commits)
        self.log.append(f"commit {names}")
        self.task_commits.append(task_commits)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        self.log.append(f"committed {names}")
        return Committed(
            [c for c in task_commits if c.task.id.processor not in self.lost],
            lost=[c.task for c in task_commits if c.task.id.processor in self.lost],
        )


def running_task(name: str, log: Log, policy: ErrorPolicy = ErrorPolicy.SKIP) -> Task:
    task = make_task(Sink(name, log), make_services(policy=policy), state=FakeState(name, log), name=name)
    task.phase = TaskPhase.RUNNING  # as after its claim and restore; its actor is not needed to commit
    return task


def sink(task: Task) -> Sink:
    processor = task._processor
    assert isinstance(processor, Sink)
    return processor


async def test_tasks_that_commit_together_prepare_in_turn_then_commit_once_then_flush_their_stores() -> None:
    log: Log = []
    a, b = running_task("a", log), running_task("b", log)
    committer = RecordingCommitter(log, commits_in_turn=False)

    await CommitCycle(committer, 60).commit([a, b])

    assert log == [
        "a flush", "a log changes", "b flush", "b log changes",  # 1, task by task
        "commit a,b", "committed a,b",  # 2
        "a flush stores", "b flush stores",  # 3
    ]  # fmt: skip


async def test_tasks_that_commit_in_turn_each_go_through_all_steps() -> None:
    log: Log = []
    a, b = running_task("a", log), running_task("b", log)
    committer = RecordingCommitter(log, commits_in_turn=True)

    await CommitCycle(committer, 60).commit([a, b])

    for name in "ab":
        steps = [entry for entry in log if name in (entry.split()[0], entry.split()[-1])]
        assert steps == [f"{name} flush", f"{name} log changes", f"commit {name}", f"committed {name}",
                         f"{name} flush stores"]  # fmt: skip


@pytest.mark.parametrize("in_turn", [False, True], ids=["together", "in turn"])
async def test_only_committed_checkpoints_flush_their_stores_and_lost_tasks_are_marked_lost(in_turn: bool) -> None:
    log: Log = []
    a, b = running_task("a", log), running_task("b", log)
    committer = RecordingCommitter(log, in_turn)
    committer.lost = {"b"}

    await CommitCycle(committer, 60).commit([a, b])

    assert "a flush stores" in log
    assert "b flush stores" not in log
    assert (a.lost, b.lost) == (False, True)
    assert not b.running


@pytest.mark.parametrize("in_turn", [False, True], ids=["together", "in turn"])
async def test_tasks_not_running_take_no_part(in_turn: bool) -> None:
    log: Log = []
    running, restoring, lost = running_task("a", log), running_task("b", log), running_task("c", log)
    restoring.phase = TaskPhase.RESTORING
    lost.lose()
    committer = RecordingCommitter(log, in_turn)

    async with lost.turn:  # its actor is still finishing a batch: the commit does not wait for it
        await asyncio.wait_for(CommitCycle(committer, 60).commit([running, restoring, lost]), 5)

    assert [[c.task for c in task_commits] for task_commits in committer.task_commits] == [[running]]
    assert not any(entry.startswith(("b ", "c ")) for entry in log)


@pytest.mark.parametrize("in_turn", [False, True], ids=["together", "in turn"])
async def test_a_failing_flush_keeps_its_task_out_and_the_others_commit_before_it_is_raised(in_turn: bool) -> None:
    log: Log = []
    a, b, c = running_task("a", log), running_task("b", log, ErrorPolicy.FAIL), running_task("c", log)
    sink(b).failing = True
    committer = RecordingCommitter(log, in_turn)
    committer.gate = asyncio.Event()
    commit = asyncio.create_task(CommitCycle(committer, 60).commit([a, b, c]))
    await asyncio.wait_for(committer.entered.wait(), 5)  # b failed by now; the others are in step 2
    finished, _ = await asyncio.wait([commit], timeout=0.05)
    assert not finished  # b's failure waits until the others' step 2 is done
    committer.gate.set()

    with pytest.raises(StopAfterCommit, match=r"failed in flush\(\) of task b\[0\]: OSError: b cannot write"):
        await commit

    # Raised only once the others' commits are complete.
    assert [c.task for task_commits in committer.task_commits for c in task_commits] == [a, c]
    assert "a flush stores" in log and "c flush stores" in log
    assert "b log changes" not in log and "b flush stores" not in log


@pytest.mark.parametrize("in_turn", [False, True], ids=["together", "in turn"])
async def test_a_task_processes_during_step_2_only_when_its_committer_does_not_commit_in_turn(in_turn: bool) -> None:
    log: Log = []
    task = make_task(Sink("a", log), make_services(), state=FakeState("a", log), name="a")
    committer = RecordingCommitter(log, in_turn)
    committer.gate = asyncio.Event()
    actor = asyncio.create_task(task.run())
    commit = asyncio.create_task(CommitCycle(committer, 60).commit([task]))
    await committer.entered.wait()

    task.enqueue(TP, [raw(0, b"{}")])
    assert task.turn.locked() is in_turn
    if not in_turn:
        await until_idle(task)  # while step 2 still waits
    committer.gate.set()
    await commit
    await until_idle(task)
    task.request_stop()
    await actor

    position = log.index("a process 0")
    assert position > log.index("committed a") if in_turn else position < log.index("committed a")


async def test_the_timer_commits_until_stopped_and_a_commit_in_progress_finishes() -> None:
    log: Log = []
    task = running_task("a", log)
    committer = RecordingCommitter(log, commits_in_turn=True)
    committer.gate = asyncio.Event()
    commit_cycle = CommitCycle(committer, 0.001)
    timer = asyncio.create_task(commit_cycle.commit_periodically(lambda: [task]))
    await committer.entered.wait()

    commit_cycle.stop_timer()
    committer.gate.set()
    await asyncio.wait_for(timer, 5)  # a bound on a hang only

    assert not timer.cancelled()
    assert log.count("commit a") == 1
    assert log[-2:] == ["committed a", "a flush stores"]


async def test_a_timer_stopped_between_commits_returns_without_waiting_for_its_interval() -> None:
    commit_cycle = CommitCycle(RecordingCommitter([], commits_in_turn=False), 3600)
    timer = asyncio.create_task(commit_cycle.commit_periodically(list))

    commit_cycle.stop_timer()
    await asyncio.wait_for(timer, 5)  # a bound on a hang only: it returns at once


@pytest.mark.parametrize("in_turn", [False, True], ids=["together", "in turn"])
async def test_step_3_tells_every_guarantees_task_what_is_durable(in_turn: bool) -> None:
    """Post-commit is the protocol's, not one committer's: the refusals below the committed offsets are
    forgotten and the stream time of the commit is kept, whichever committer ran step 2."""
    log: Log = []
    task = running_task("a", log)
    task.next_offsets = {TopicPartition(IN, 0): 5}
    task.refuse({(IN, 0, 3): "too large", (IN, 0, 7): "too large"})
    task.context.latest_timestamp = 1_000

    await CommitCycle(RecordingCommitter(log, in_turn), 60).commit([task])
    task.context.latest_timestamp = 2_000
    task.rewind({TopicPartition(IN, 0): 5})

    assert task.context._refused == {(IN, 0, 7): "too large"}
    assert task.context.latest_timestamp == 1_000
    assert log.index("committed a") < log.index("a flush stores")


async def test_one_commit_for_the_worker_holds_every_running_task_whichever_it_was_asked_for() -> None:
    """A revoke asks for the tasks leaving; one transaction per worker commits the others' work with theirs."""
    log: Log = []
    a, b = running_task("a", log), running_task("b", log)
    committer = RecordingCommitter(log, commits_in_turn=True)
    committer.commits_together = True
    cycle = CommitCycle(committer, 60)
    cycle.stop_timer()
    await cycle.commit_periodically(lambda: [a, b])  # learns the worker's tasks, and returns, stopped

    await cycle.commit([a])

    assert [[c.task for c in commits] for commits in committer.task_commits] == [[a, b]]
    assert log[-2:] == ["a flush stores", "b flush stores"]


async def test_a_failed_flush_holds_back_the_commit_of_every_task_sharing_its_transaction() -> None:
    log: Log = []
    a, b = running_task("a", log), running_task("b", log)
    committer = RecordingCommitter(log, commits_in_turn=True)
    committer.commits_together = True
    sink(b).failing = True  # under `skip`: its offsets wait until a flush succeeds

    await CommitCycle(committer, 60).commit([a, b])

    assert committer.task_commits == []
    assert "a flush stores" not in log


async def test_a_task_leaving_waits_for_a_commit_that_holds_it_and_takes_no_part_in_later_ones() -> None:
    """Beside a cooperative revoke the kept tasks' commits go on: one that took the leaving task's turn first
    flushes its stores before they close, and none after takes it."""
    log: Log = []
    leaving, kept = running_task("leaving", log), running_task("kept", log)
    committer = RecordingCommitter(log, commits_in_turn=True)
    committer.commits_together = True
    committer.gate = asyncio.Event()
    cycle = CommitCycle(committer, 60)
    under_way = asyncio.create_task(cycle.commit([leaving, kept]))
    await committer.entered.wait()

    left = asyncio.create_task(leaving.leave_commits())
    await asyncio.sleep(0.01)
    assert not left.done() and leaving.running  # the commit holds its turn
    committer.gate.set()
    await under_way
    await left

    assert "leaving flush stores" in log and not leaving.running
    committer.gate = None
    await cycle.commit([leaving, kept])
    assert [[c.task for c in commits] for commits in committer.task_commits] == [[leaving, kept], [kept]]


@pytest.mark.parametrize("in_turn", [False, True], ids=["at-least-once", "in-turn"])
async def test_after_a_final_commit_no_commit_takes_its_tasks_before_they_close(in_turn: bool) -> None:
    """A revoke's final commit, then the timer's before the leaving task closes: under at-least-once that one
    flushed the stores in its step 3 after they had closed (a worker stopped on "DB instance already closed")."""
    log: Log = []
    leaving, kept = running_task("leaving", log), running_task("kept", log)
    committer = RecordingCommitter(log, commits_in_turn=in_turn)
    cycle = CommitCycle(committer, 60)

    await cycle.commit([leaving], final=True)
    assert not leaving.running
    await cycle.commit([leaving, kept])  # the timer's, with every task the worker still lists

    assert [[c.task for c in commits] for commits in committer.task_commits] == [[leaving], [kept]]
    assert log.count("leaving flush stores") == 1
