"""Replay jobs as a service against a real broker: requests become jobs once, a job replays exactly its
records and completes, a bad request fails saying why, and a job whose worker is killed -9 is taken over
from the offset it reached, its output holding every record once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from runtime.commands.cluster import connect
from runtime.replay.jobs.cli import jobs
from runtime.replay.jobs.state import JobState, ReplayRequest, Status
from runtime.replay.partitioners import PARTITIONERS
from runtime.replay.scan import Replay
from tests.conftest import TopicNamer
from tests.integration.test_replay import KEYS, _iso, activity, librdkafka_placed
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import REPO, SPAWNED, write_app

HEARTBEAT_MS, TAKEOVER_MS = 200, 2_000
Records = list[tuple[bytes, bytes]]
RECORDS = 200_000  # of one partition, replayed whole: the job takes seconds, long enough to be killed in


def service_app(tmp_path: Path, topic_name: TopicNamer, topics: dict[str, int], max_jobs: int = 2) -> Path:
    app = {
        "app_id": topic_name("replayer"),
        "topics": {
            name: {"partitions": count, "key_serde": "str", "value_serde": "bytes"} for name, count in topics.items()
        },
        "processors": [{"name": "echo", "class": "tests.support.apps:Echo", "inputs": [next(iter(topics))]}],
        "replay_jobs": {"max_jobs": max_jobs, "heartbeat_ms": HEARTBEAT_MS, "takeover_after_ms": TAKEOVER_MS},
    }
    return write_app(tmp_path, app)


def env(bootstrap: str) -> dict[str, str]:
    return {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PYTHONPATH": str(REPO)}


def serve(app: Path, bootstrap: str, worker: str, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "runtime", "replay-jobs", "serve", "--app", str(app), "--worker", worker]
    process = subprocess.Popen(command, cwd=REPO, env=env(bootstrap), stdout=log.open("ab"), stderr=subprocess.STDOUT,
                               start_new_session=True)  # fmt: skip
    SPAWNED.append(process)
    return process


def command(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime", "replay-jobs", *args], cwd=REPO, env=env(bootstrap),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def states(app: Path, bootstrap: str) -> dict[str, JobState]:
    os.environ.setdefault("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
    return asyncio.run(jobs(connect(app), connect(app).app))  # type: ignore[arg-type]


def wait_for(check: Any, timeout_s: float, what: str, seen: Any = lambda: "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} {seen()}")


def whole_partition_job(bootstrap: str, topic_name: TopicNamer, tmp_path: Path) -> tuple[Path, str, Records]:
    """RECORDS records in a topic of one partition, a service app of one job at a time, and a request for
    the job "whole": every record of the partition to a target of 3 partitions. (app, target, records)"""
    topic, target = topic_name("activity"), topic_name("replays")
    asyncio.run(create_topic(bootstrap, topic, 1))
    asyncio.run(create_topic(bootstrap, target, 3))
    records = [(f"acc-{n % 500:04d}".encode(), f"event-{n}".encode()) for n in range(RECORDS)]
    asyncio.run(produce(bootstrap, topic, records, max_batch_size=1 << 20))
    app = service_app(tmp_path, topic_name, {topic: 1, target: 3}, max_jobs=1)
    asked = command(bootstrap, "request", topic, "--app", str(app), "--partition", "0", "--to-topic", target,
                    "--id", "whole")  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    return app, target, records


def under_way(state: JobState) -> bool:
    return state.status is Status.ONGOING and state.matched > 0


def ended(state: JobState) -> bool:
    return state.status.ended


def whole_job(app: Path, bootstrap: str, wanted: Callable[[JobState], bool], what: str) -> JobState:
    def found() -> JobState | None:
        state = states(app, bootstrap).get("whole")
        return state if state is not None and wanted(state) else None

    return cast(JobState, wait_for(found, 120, f"the job {what}"))


def murmur2(topic: str, key: bytes) -> int:
    """The partition of 3 that `replay` reads for `key` by default."""
    return Replay(topic, key).partition_of(3)


def test_a_job_replays_its_records_once_also_of_a_key_librdkafka_placed_and_a_bad_request_fails_saying_why(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    topic, target = topic_name("activity"), topic_name("replays")
    for name in (topic, target):
        asyncio.run(create_topic(kafka_bootstrap, name, 3))
    start = time.time_ns() // 1_000_000 - 3_600_000
    written = asyncio.run(activity(kafka_bootstrap, topic, start))
    app = service_app(tmp_path, topic_name, {topic: 3, target: 3})
    serve(app, kafka_bootstrap, "w1", tmp_path / "w1.log")
    key, begin, end = KEYS[5], start + 105_000, start + 405_000
    expected = [t for k, t in written if k == key and begin <= t < end]
    asked = ["request", topic, "--app", str(app), "--key", key, "--from", _iso(begin), "--to", _iso(end),
             "--to-topic", target, "--id", "one-key", "--wait"]  # fmt: skip
    done = command(kafka_bootstrap, *asked)
    assert done.returncode == 0, done.stderr + (tmp_path / "w1.log").read_text()
    final = JobState.decode(done.stdout)
    assert (final.status, final.matched, final.owner) == (Status.COMPLETED, len(expected), "w1")
    replayed = asyncio.run(read_topic(kafka_bootstrap, target))
    assert [(r.key, r.timestamp) for r in replayed] == [(key.encode(), t) for t in expected]
    # The same id again: a repeat, dropped; the output is left as it was.
    again = command(kafka_bootstrap, *asked)
    assert again.returncode == 0 and JobState.decode(again.stdout).status is Status.COMPLETED
    assert len(asyncio.run(read_topic(kafka_bootstrap, target))) == len(expected)
    # A key librdkafka placed with its default partitioner, in another partition than murmur2's: found there.
    crc32 = PARTITIONERS["consistent_random"]
    placed = next(k for k in (f"lib-{n}".encode() for n in range(100)) if crc32.partition(k, 3) != murmur2(topic, k))
    partition = crc32.partition(placed, 3)
    assert set(librdkafka_placed(kafka_bootstrap, topic, [placed] * 3)) == {partition}
    asked_placed = ["request", topic, "--app", str(app), "--key", placed.decode(), "--to-topic", target,
                    "--partitioner", "consistent_random", "--id", "librdkafka-key", "--wait"]  # fmt: skip
    done = command(kafka_bootstrap, *asked_placed)
    assert done.returncode == 0, done.stderr
    final = JobState.decode(done.stdout)
    assert (final.status, final.matched, final.partition) == (Status.COMPLETED, 3, partition)
    replayed = asyncio.run(read_topic(kafka_bootstrap, target))
    assert [r.key for r in replayed if r.key != key.encode()] == [placed] * 3
    # Requests that cannot be done end FAILED, each with its reason.
    requests = topic_name("replayer") + "-replay-requests"
    bad = [
        (b"not-json", b"{oops"),
        (b"no-topic", json.dumps({"topic": topic_name("missing"), "key": "a", "target": target}).encode()),
        (b"no-partition", json.dumps({"topic": topic, "partition": 7, "target": target}).encode()),
        (b"both", json.dumps({"topic": topic, "key": "a", "partition": 0, "target": target}).encode()),
        (b"itself", json.dumps({"topic": topic, "key": "a", "target": topic}).encode()),
        (b"crc", json.dumps({"topic": topic, "key": "a", "partitioner": "crc32", "target": target}).encode()),
    ]
    asyncio.run(produce(kafka_bootstrap, requests, bad))
    reasons = {
        "not-json": "the request cannot be read: ",
        "no-topic": "does not exist",
        "no-partition": "has no partition 7 (it has 3)",
        "both": "give either key or partition",
        "itself": "the replay would never end",
        "crc": "unknown partitioner 'crc32': expected one of librdkafka's, murmur2_random, murmur2, consistent_random",
    }

    def failed() -> dict[str, JobState] | None:
        found = states(app, kafka_bootstrap)
        done = {name: found[name] for name in reasons if name in found and found[name].status.ended}
        return done if len(done) == len(reasons) else None

    done = wait_for(failed, 30, "the bad requests to fail", lambda: f"{states(app, kafka_bootstrap)}")
    for name, reason in reasons.items():
        assert done[name].status is Status.FAILED and reason in (done[name].reason or ""), done[name]
    listed = command(kafka_bootstrap, "list", "--app", str(app), "--json")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == len(reasons) + 2


def test_a_job_whose_worker_is_killed_is_taken_over_and_its_output_holds_each_record_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, target, records = whole_partition_job(kafka_bootstrap, topic_name, tmp_path)
    workers = {name: serve(app, kafka_bootstrap, name, tmp_path / f"{name}.log") for name in ("w1", "w2")}

    running = whole_job(app, kafka_bootstrap, under_way, "to be under way")
    assert running.owner in workers and running.matched < RECORDS, running
    workers[running.owner].send_signal(signal.SIGKILL)
    workers[running.owner].wait()
    survivor = next(name for name in workers if name != running.owner)

    final = whole_job(app, kafka_bootstrap, ended, "to end")
    log = (tmp_path / f"{survivor}.log").read_text()
    assert (final.status, final.owner, final.matched, final.scanned) == (Status.COMPLETED, survivor, RECORDS, RECORDS)
    assert "taking it over" in log
    resumed = [int(line.split(" from offset ")[1].split()[0]) for line in log.splitlines() if " from offset " in line]
    reached = running.next_offset or 0
    assert resumed and resumed[-1] >= reached > 0  # went on from where the killed worker had got to
    replayed = asyncio.run(read_topic(kafka_bootstrap, target))
    assert Counter((r.key, r.value) for r in replayed) == Counter(records)  # each once, none missing
    by_key: dict[bytes, list[bytes]] = {}
    for r in replayed:
        by_key.setdefault(r.key, []).append(r.value)
    assert all(values == [v for k, v in records if k == key] for key, values in by_key.items())  # in order


def test_a_worker_told_to_stop_releases_its_job_and_another_goes_on_from_its_offset_at_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, target, records = whole_partition_job(kafka_bootstrap, topic_name, tmp_path)
    first = serve(app, kafka_bootstrap, "w1", tmp_path / "w1.log")

    whole_job(app, kafka_bootstrap, under_way, "to be under way")
    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 0
    released = states(app, kafka_bootstrap)["whole"]
    assert released.status is Status.OPEN and 0 < released.share_read < 1, released
    serve(app, kafka_bootstrap, "w2", tmp_path / "w2.log")

    final = whole_job(app, kafka_bootstrap, ended, "to end")
    assert (final.status, final.owner, final.matched) == (Status.COMPLETED, "w2", RECORDS)
    log = (tmp_path / "w2.log").read_text()
    assert "taking it over" not in log  # an OPEN job, claimed at once: no heartbeat timeout to wait for
    assert f"from offset {released.next_offset} " in log
    replayed = asyncio.run(read_topic(kafka_bootstrap, target))
    assert Counter((r.key, r.value) for r in replayed) == Counter(records)


ZOMBIE = """
import asyncio, sys
from aiokafka import AIOKafkaProducer

async def main() -> None:
    producer = AIOKafkaProducer(bootstrap_servers=sys.argv[1], transactional_id=sys.argv[3],
                                transaction_timeout_ms=1000)
    await producer.start()
    await producer.begin_transaction()
    await (await producer.send(sys.argv[2], b'{"id": "other", "status": "ONGOING"}', key=b"other"))
    print("open", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_a_completed_job_is_not_run_again_while_a_dead_workers_transaction_holds_the_jobs_topic(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    """A worker killed with a transaction open on the jobs topic holds every read-committed reader of it
    back at that transaction's start until the broker aborts it. A job run to its end meanwhile must not
    look unfinished to the worker that ran it: it would claim it again and replay it once more."""
    topic, target = topic_name("activity"), topic_name("replays")
    asyncio.run(create_topic(kafka_bootstrap, topic, 1))
    asyncio.run(create_topic(kafka_bootstrap, target, 1))
    records = [(f"acc-{n % 7}".encode(), f"event-{n}".encode()) for n in range(300)]
    asyncio.run(produce(kafka_bootstrap, topic, records))
    app = service_app(tmp_path, topic_name, {topic: 1, target: 1}, max_jobs=1)
    jobs_topic = f"{topic_name('replayer')}-replay-jobs"
    asyncio.run(create_topic(kafka_bootstrap, jobs_topic, 1, {"cleanup.policy": "compact"}))
    request = ReplayRequest.model_validate({"id": "whole", "topic": topic, "partition": 0, "target": target})
    opened = JobState(id="whole", status=Status.OPEN, request=request)
    asyncio.run(produce(kafka_bootstrap, jobs_topic, [(b"whole", opened.encode())]))
    zombie = subprocess.Popen([sys.executable, "-c", ZOMBIE, kafka_bootstrap, jobs_topic, topic_name("zombie")],
                              cwd=REPO, env=env(kafka_bootstrap), stdout=subprocess.PIPE, text=True)  # fmt: skip
    SPAWNED.append(zombie)
    assert zombie.stdout is not None and zombie.stdout.readline() == "open\n"
    zombie.send_signal(signal.SIGKILL)
    zombie.wait()

    serve(app, kafka_bootstrap, "w1", tmp_path / "w1.log")
    final = whole_job(app, kafka_bootstrap, ended, "to end")  # read once the broker aborted the zombie's
    time.sleep(1)  # a claim made from a board that had not yet seen the end would have replayed by now
    assert (final.status, final.matched) == (Status.COMPLETED, len(records))
    replayed = asyncio.run(read_topic(kafka_bootstrap, target))
    assert Counter((r.key, r.value) for r in replayed) == Counter(records), (tmp_path / "w1.log").read_text()
