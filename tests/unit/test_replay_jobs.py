"""Replay jobs' pure logic: what a request may ask, the job a request record makes, when a job may be
claimed, and the settings' own check."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import ClassVar

import pytest
from pydantic import ValidationError

from runtime.config import parse_app
from runtime.config.replay_jobs import ReplayJobsConfig
from runtime.replay.jobs.intake import job_of
from runtime.replay.jobs.service import ReplayService
from runtime.replay.jobs.state import JobState, ReplayRequest, Status


def record(value: object, key: bytes | None = None, offset: int = 7) -> SimpleNamespace:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return SimpleNamespace(topic="requests", partition=0, offset=offset, key=key, value=raw)


def test_a_request_takes_iso_times_or_milliseconds() -> None:
    request = ReplayRequest.model_validate(
        {"id": "j", "topic": "a", "key": "k", "from": "2026-11-20T10:00:00Z", "to": 1_795_200_000_000, "target": "b"}
    )
    assert (request.start_ms, request.end_ms) == (1_795_168_800_000, 1_795_200_000_000)
    assert ReplayRequest.model_validate_json(request.encode()) == request


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"topic": "a", "target": "b"}, "give either key or partition"),
        ({"topic": "a", "key": "k", "partition": 1, "target": "b"}, "give either key or partition"),
        ({"topic": "a", "key": "k", "from": 2000, "to": 1000, "target": "b"}, "'to' must come after 'from'"),
        ({"topic": "a", "key": "k", "target": "a"}, "the replay would never end"),
        ({"topic": "a", "key": "k", "from": "yesterday", "target": "b"}, "is not a time"),
        ({"topic": "a", "key": "k", "target": "b", "colour": "red"}, "Extra inputs are not permitted"),
        (
            {"topic": "a", "key": "k", "partitioner": "crc32", "target": "b"},
            "unknown partitioner 'crc32': expected one of librdkafka's, murmur2_random, murmur2, consistent_random, "
            "consistent, fnv1a_random, fnv1a",
        ),
        (
            {"topic": "a", "partition": 0, "partitioner": "consistent", "target": "b"},
            "a partitioner places a key; partition names the partition itself",
        ),
    ],
)
def test_a_request_that_cannot_be_done_is_refused_saying_why(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ReplayRequest.model_validate({"id": "j", **fields})


def test_a_request_names_the_partitioner_that_placed_its_key_or_takes_replays_default() -> None:
    asked = {"id": "j", "topic": "a", "key": "k", "target": "b"}
    assert ReplayRequest.model_validate(asked).partitioner == "murmur2_random"
    librdkafkas = ReplayRequest.model_validate({**asked, "partitioner": "consistent_random"})
    assert ReplayRequest.model_validate_json(librdkafkas.encode()).partitioner == "consistent_random"
    job = JobState(id="j", status=Status.OPEN, request=librdkafkas)
    assert JobState.decode(job.encode()) == job


def test_a_request_record_becomes_an_open_job_named_by_its_id_its_key_or_its_offset() -> None:
    asked = {"topic": "a", "key": "k", "target": "b"}
    assert job_of(record({**asked, "id": "mine"}, key=b"other")).id == "mine"
    by_key = job_of(record(asked, key=b"job-1"))
    assert (by_key.id, by_key.status, by_key.request and by_key.request.key) == ("job-1", Status.OPEN, "k")
    assert job_of(record(asked)).id == "requests-0-7"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{oops", "the request cannot be read: Expecting property name"),
        ([1, 2], "the request cannot be read: a request is a JSON object"),
        ({"topic": "a", "target": "b"}, "the request cannot be read: request: Value error, give either key or"),
        ({"topic": "a", "key": "k"}, "the request cannot be read: target: Field required"),
    ],
)
def test_a_request_that_cannot_be_read_becomes_a_failed_job_saying_why(value: object, reason: str) -> None:
    job = job_of(record(value, key=b"bad"))
    assert (job.id, job.status, job.request) == ("bad", Status.FAILED, None)
    assert job.reason is not None and job.reason.startswith(reason), job.reason


def test_a_job_is_claimable_when_open_or_when_its_worker_went_quiet() -> None:
    request = ReplayRequest(id="j", topic="a", key="k", target="b")
    open_job = JobState(id="j", status=Status.OPEN, request=request)
    running = JobState(id="j", status=Status.ONGOING, request=request, owner="w1", heartbeat_ms=10_000)
    assert open_job.claimable(now_ms=0, takeover_after_ms=5_000)
    assert not running.claimable(now_ms=14_999, takeover_after_ms=5_000)
    assert running.claimable(now_ms=15_000, takeover_after_ms=5_000) and running.abandoned(15_000, 5_000)
    for ended in (Status.COMPLETED, Status.FAILED):
        assert not running.model_copy(update={"status": ended}).claimable(now_ms=10**12, takeover_after_ms=5_000)
    assert JobState.decode(running.encode()) == running


def test_takeover_waits_for_at_least_three_missed_heartbeats() -> None:
    with pytest.raises(ValidationError, match=r"takeover_after_ms \(2000\) must be at least 3 heartbeats \(3000\)"):
        ReplayJobsConfig(heartbeat_ms=1_000, takeover_after_ms=2_000)
    assert ReplayJobsConfig(heartbeat_ms=1_000, takeover_after_ms=3_000).max_jobs == 4


class HeldRunner:
    """Stands for a job's runner: runs until released, then says the job ended."""

    started: ClassVar[list[str]] = []
    release = asyncio.Event()

    def __init__(self, job: JobState, place: object):
        self.id = job.id

    async def run(self) -> bool:
        HeldRunner.started.append(self.id)
        await HeldRunner.release.wait()
        return True


@pytest.mark.anyio
async def test_a_worker_runs_at_most_max_jobs_at_once_and_claims_the_next_ones_as_they_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("runtime.replay.jobs.service.JobRunner", HeldRunner)
    HeldRunner.started, HeldRunner.release = [], asyncio.Event()
    config = parse_app({
        "app_id": "replayer", "topics": {"a": {}},
        "processors": [{"name": "echo", "class": "tests.support.apps:Echo", "inputs": ["a"]}],
        "replay_jobs": {"max_jobs": 2, "heartbeat_ms": 10, "takeover_after_ms": 100},
    })  # fmt: skip
    service = ReplayService(config, "127.0.0.1:9", worker="w1")
    request = ReplayRequest(id="j", topic="a", key="k", target="b")
    for number in range(5):
        service.board.note(JobState(id=f"job-{number}", status=Status.OPEN, request=request))
    scheduling = asyncio.create_task(service._schedule())
    await asyncio.sleep(1.0)
    assert len(HeldRunner.started) == 2  # five claimable, two at once
    for job_id in HeldRunner.started:  # as the jobs topic would say once they completed
        service.board.note(JobState(id=job_id, status=Status.COMPLETED, request=request))
    HeldRunner.release.set()
    await asyncio.sleep(1.0)
    assert set(HeldRunner.started) == {f"job-{number}" for number in range(5)}  # the other three, in turn
    service.stop()
    await asyncio.wait_for(scheduling, 5)
