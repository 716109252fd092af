"""Seed 003's account activity replay, end to end: `python -m examples.account_activity.run` (`make example-replay`).

Starts (or reuses) a local Kafka broker, deletes what an earlier run left (the example's topics, its
replay jobs and the app's state), and produces five simulated days of account activity, about 1% of the
events twice. Then, as a user would:

1. `python -m runtime replay activity --key ACCOUNT --from T --to T+2h`: one account's events over two
   hours, read from the one partition its key hashes to, from the range's first offset; checked against
   the events made here.
2. `python -m runtime replay-jobs serve` in two worker processes, and one replay job per partition
   requested with `python -m runtime replay-jobs request`: the five days sent again to `activity-replays`.
   One worker is killed -9 in the middle of a job; the other takes the job over from the offset it
   reached. `activity-replays` must then hold every record of `activity` exactly once (read committed).
3. `python -m runtime app.yaml --until-caught-up`: the de-duplication (seed 003's cache of event hashes)
   writes each event to `activity-unique` once, the repeats dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from examples.account_activity.events import Event, five_days, produce
from examples.demo_cli import clock, run_plain_demo
from examples.payments.run import ROOT
from runtime.config import AppConfig, load_app
from runtime.kafka.connection import Clients
from runtime.replay.jobs.board import Board
from runtime.replay.jobs.state import JobState, Status
from runtime.replay.scan import Replay

APP_YAML = Path("examples/account_activity/app.yaml")  # relative to ROOT, as a user would type it
HOUR_MS = 3_600_000
Seen = Counter[tuple[bytes | None, bytes | None, int]]


def demo(app_yaml: Path, bootstrap: str, events: int, accounts: int, seed: int, timeout_s: float) -> list[str]:
    app = load_app(ROOT / app_yaml)
    activity, unique = app.processors[0].inputs[0], app.processors[0].params["output"]
    (replays,) = set(app.topics) - {activity, unique}  # where the replay jobs write
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    asyncio.run(start_over(bootstrap, app))
    subprocess.run(_runtime("topics", "create", "--app", str(app_yaml)), cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    end_ms = int(time.time() * 1000) - HOUR_MS
    made = five_days(events, accounts, end_ms, seed)
    print(f"producing {len(made):,} events of {accounts:,} accounts over five days to {clock(end_ms)} (seed {seed})")
    asyncio.run(produce(bootstrap, activity, made))
    logs = Path(tempfile.mkdtemp(prefix="account-activity-"))
    problems = replay_one_account(app_yaml, env, activity, made, logs)
    problems += replay_jobs_through_a_kill(app_yaml, app, env, activity, replays, logs, timeout_s)
    problems += deduplicated(app_yaml, app, env, unique, made, logs, timeout_s)
    return problems


def replay_one_account(app_yaml: Path, env: dict[str, str], topic: str, made: list[Event], logs: Path) -> list[str]:
    account = made[len(made) // 2].account
    start = made[len(made) // 2].timestamp - HOUR_MS
    expected = [e for e in made if e.account == account and start <= e.timestamp < start + 2 * HOUR_MS]
    output = logs / "one-account.jsonl"
    command = _runtime("replay", topic, "--app", str(app_yaml), "--key", account, "--from", _iso(start), "--to",
                       _iso(start + 2 * HOUR_MS), "--output", str(output), "--no-progress")  # fmt: skip
    print(f"  running: python {' '.join(command[1:])}", flush=True)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return [f"the replay command failed: {done.stderr.strip()}"]
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    found = [(line["key"], line["timestamp"], json.dumps(line["value"], separators=(",", ":"))) for line in lines]
    partition = Replay(topic, account.encode()).partition_of(6)
    print(f"  {len(found)} events of {account} in those two hours, read from partition {partition} only")
    if found != [(e.account, e.timestamp, e.value.decode()) for e in expected]:
        return [f"the replay of {account} gave {len(found)} events, {len(expected)} expected (output {output})"]
    return []


def replay_jobs_through_a_kill(app_yaml: Path, app: AppConfig, env: dict[str, str], topic: str, target: str,
                               logs: Path, timeout_s: float) -> list[str]:  # fmt: skip
    workers = {name: _serve(app_yaml, env, name, logs) for name in ("worker-1", "worker-2")}
    partitions = app.topics[topic].partitions
    try:
        deadline = time.monotonic() + timeout_s
        try:
            victim = asyncio.run(
                _job_under_way(
                    app,
                    env["KAFKA_BOOTSTRAP_SERVERS"],
                    partitions,
                    timeout_s,
                    lambda: _request_jobs(app_yaml, env, topic, partitions, target),
                )
            )
        except JobRequestFailed as failed:
            return [f"a replay job's request failed: {failed}"]
        if victim is None:
            return ["no replay job was seen under way: nothing to kill"]
        assert victim.owner is not None
        workers[victim.owner].send_signal(signal.SIGKILL)
        print(f"  killed {victim.owner} (kill -9) in job {victim.id}, at offset {victim.next_offset:,} "
              f"of {victim.start_offset:,}..{victim.end_offset:,}")  # fmt: skip
        states: list[JobState] = []
        while time.monotonic() < deadline:
            states = _jobs(app_yaml, env)
            if len(states) == partitions and all(state.status.ended for state in states):
                break
            time.sleep(0.5)
    finally:
        for worker in workers.values():
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
    problems = [f"job {s.id} ended {s.status}: {s.reason}" for s in states if s.status is not Status.COMPLETED]
    if len(states) != partitions or not all(state.status.ended for state in states):
        return [f"the replay jobs did not all end within {timeout_s:.0f} s (logs in {logs})", *problems]
    taken = next(state for state in states if state.id == victim.id)
    if taken.owner == victim.owner:
        problems.append(f"job {victim.id} was not taken over from {victim.owner} (logs in {logs})")
    else:
        print(f"  {taken.owner} took {victim.id} over and completed it; all {len(states)} jobs completed")
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    source = asyncio.run(_records(bootstrap, topic, partitions))
    copied = asyncio.run(_records(bootstrap, target, app.topics[target].partitions))
    if copied != source:
        twice = sum(count - 1 for record, count in copied.items() if count > 1)
        missing = sum((source - copied).values())
        problems.append(f"{target} holds {sum(copied.values()):,} records for {sum(source.values()):,}: "
                        f"{twice:,} repeated, {missing:,} missing")  # fmt: skip
    else:
        print(f"  {target} holds each of the {sum(source.values()):,} records of {topic} once (read committed)")
    return problems


def deduplicated(app_yaml: Path, app: AppConfig, env: dict[str, str], unique: str, made: list[Event], logs: Path,
                 timeout_s: float) -> list[str]:  # fmt: skip
    command = _runtime(str(app_yaml), "--until-caught-up")
    print(f"  running: python {' '.join(command[1:])}", flush=True)
    with (logs / "dedup.log").open("w") as log:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                              check=False)  # fmt: skip
    if done.returncode != 0:
        return [f"the de-duplication app exited with {done.returncode} (log {logs / 'dedup.log'})"]
    ids = Counter(
        json.loads(value or b"{}")["event_id"]
        for _, value, _ in asyncio.run(_records(env["KAFKA_BOOTSTRAP_SERVERS"], unique, app.topics[unique].partitions))
    )
    distinct = {event.event_id for event in made}
    print(f"  {unique} holds {sum(ids.values()):,} events: {len(made) - len(distinct):,} repeats dropped")
    if set(ids) != distinct or max(ids.values()) != 1:
        return [f"{unique} holds {len(ids):,} distinct events of {len(distinct):,}, "
                f"{sum(c - 1 for c in ids.values()):,} more than once"]  # fmt: skip
    return []


class JobRequestFailed(Exception):
    pass


def _request_jobs(app_yaml: Path, env: dict[str, str], topic: str, partitions: int, target: str) -> None:
    """`replay-jobs request` for every partition, all at once; raises `JobRequestFailed` when one fails."""
    requests = [_request_job(app_yaml, env, topic, partition, target) for partition in range(partitions)]
    for request in requests:
        _, stderr = request.communicate()
        if request.returncode != 0:
            raise JobRequestFailed(stderr.decode().strip())
    print(f"  requested {partitions} replay jobs, one per partition, of two workers")


async def _job_under_way(
    app: AppConfig, bootstrap: str, jobs: int, timeout_s: float, request_jobs: Callable[[], None]
) -> JobState | None:
    """The first state of a job under way with records still to read, as the jobs topic gets it (a job takes
    a fraction of a second: the board follows the topic as the workers do, from before the jobs are asked
    for, so that no state it reads is one a job had left behind already); None once every job ended without
    one seen, as a job of one batch (runtime/replay/scan.py) never shows one."""
    board = Board(Clients(app, bootstrap), app.replay_jobs_topic(), "demo")
    await board.start()
    following = asyncio.create_task(board.follow())
    try:
        await board.caught_up()
        await asyncio.to_thread(request_jobs)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = list(board.jobs.values())
            for state in states:
                if state.status is Status.ONGOING and state.share_read < 1:
                    return state
            if len(states) == jobs and all(state.status.ended for state in states):
                return None
            await asyncio.sleep(0.002)
        return None
    finally:
        following.cancel()
        await board.stop()


def _request_job(
    app_yaml: Path, env: dict[str, str], topic: str, partition: int, target: str
) -> subprocess.Popen[bytes]:
    """`replay-jobs request` for one partition, started beside the others'."""
    command = _runtime("replay-jobs", "request", topic, "--app", str(app_yaml), "--partition", str(partition),
                       "--to-topic", target, "--id", f"partition-{partition}")  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _jobs(app_yaml: Path, env: dict[str, str]) -> list[JobState]:
    command = _runtime("replay-jobs", "list", "--app", str(app_yaml), "--json")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return [JobState.decode(line) for line in done.stdout.splitlines()]


def _serve(app_yaml: Path, env: dict[str, str], name: str, logs: Path) -> subprocess.Popen[bytes]:
    command = _runtime("replay-jobs", "serve", "--app", str(app_yaml), "--worker", name)
    with (logs / f"{name}.log").open("w") as log:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


async def _records(bootstrap: str, topic: str, partitions: int) -> Seen:
    """Every record of the topic, read committed: (key, value, timestamp) and how often it is there."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                max_partition_fetch_bytes=4 << 20)  # fmt: skip
    await consumer.start()
    seen: Seen = Counter()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for records in (await consumer.getmany(timeout_ms=500, max_records=50_000)).values():
                seen.update((record.key, record.value, record.timestamp) for record in records)
    finally:
        await consumer.stop()
    return seen


async def start_over(bootstrap: str, app: AppConfig) -> None:
    """Delete the topics an earlier run left, the replay jobs' and the de-duplication's store's with them
    (committed offsets go with their topics), and the app's local state."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        changelogs = {app.changelog_topic(store) for processor in app.processors for store in processor.stores}
        owned = {*app.topics, app.replay_requests_topic(), app.replay_jobs_topic(), *changelogs}
        while existing := sorted(owned & set(await admin.list_topics())):
            await admin.delete_topics(existing)
            await asyncio.sleep(0.5)
    finally:
        await admin.close()
    shutil.rmtree(app.state_dir / app.app_id, ignore_errors=True)


def _runtime(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime", *args]


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.account_activity.run", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--events", type=int, default=300_000, help="distinct events over the five days (default 300000)"
    )
    parser.add_argument("--accounts", type=int, default=200, help="accounts (default 200)")
    return run_plain_demo(
        parser,
        argv,
        lambda bootstrap, args, seed: demo(APP_YAML, bootstrap, args.events, args.accounts, seed, args.timeout),
        "OK: one account's two hours replayed from its partition alone; every record replayed once by jobs that "
        "outlived a killed worker; each event made unique",
    )


if __name__ == "__main__":
    sys.exit(main())
