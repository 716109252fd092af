"""Takeover of an outbox's poller after `kill -9` of the process that runs it, among three.

`python -m bench.singleton [--runs 3] [--session-timeout-ms 6000] [--bootstrap HOST:PORT] [--database URL]`

Each run starts three `python -m runtime app.yaml` processes of one app with an outbox (settle window 0,
polled every 20 ms), waits until one of them runs the poller and the others stand by, and writes a row
every 20 ms, each carrying the time just before its insert. Two seconds into the writing, the process
that runs the poller is killed -9. The takeover is the span from the kill to the first record written
after it becoming visible to a read_committed consumer; the election is the span from the kill to the
new owner's log line saying it runs the poller. Both as medians of the runs. Starts its own Kafka broker
and PostgreSQL unless given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import yaml
from aiokafka import AIOKafkaConsumer

from bench.app import RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.outbox import app_yaml, fresh_table
from bench.postgres_sink import postgres
from bench.stats import median, run_directory, write_result

RUNS, STANDS_BY = "this process runs it now", "this one stands by"
ROW_EVERY_S = 0.02
KILL_AFTER_S = 2.0


def last_election(process: RuntimeProcess) -> str | None:
    """RUNS or STANDS_BY, whichever the process logged last; None before its first election."""
    found = None
    for line in process.log().splitlines():
        found = RUNS if RUNS in line else STANDS_BY if STANDS_BY in line else found
    return found


def elected_at(process: RuntimeProcess, after: float) -> float | None:
    """The epoch time of the process's first RUNS line after `after`."""
    for when, line in process.timed_lines():
        if RUNS in line and when.timestamp() > after:
            return when.timestamp()
    return None


async def steady(processes: list[RuntimeProcess], timeout_s: float = 120.0) -> RuntimeProcess:
    """The one process that runs the poller, once every process has stood for election."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        elections = [last_election(process) for process in processes]
        if None not in elections and elections.count(RUNS) == 1:
            return processes[elections.index(RUNS)]
        if not all(process.running() for process in processes):
            break
        await asyncio.sleep(0.1)
    raise RuntimeError(f"no single owner of the poller; logs {[str(p.log_path) for p in processes]}")


async def write_rows(url: str, table: str, stop: asyncio.Event) -> None:
    connection = await asyncpg.connect(url)
    try:
        n = 0
        while not stop.is_set():
            await connection.execute(f"INSERT INTO {table} (aggregate, payload) VALUES ($1, $2)",
                                     f"order-{n % 100}", json.dumps({"n": n, "t": time.time()}))  # fmt: skip
            n += 1
            await asyncio.sleep(ROW_EVERY_S)
    finally:
        await connection.close()


async def first_visible_after(bootstrap: str, topic: str, moment: float, timeout_s: float) -> float:
    """When the first record written after `moment` became visible (read_committed)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                                auto_offset_reset="earliest", group_id=None, enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=50)).values():
                now = time.time()
                if any(json.loads(record.value)["t"] > moment for record in records):
                    return now
    finally:
        await consumer.stop()
    raise RuntimeError(f"no record written after the kill became visible within {timeout_s:.0f}s")


def one_run(bootstrap: str, url: str, session_timeout_ms: int, workdir: Path) -> dict[str, float]:
    table = asyncio.run(fresh_table(url, 0))
    topic = f"bench-singleton-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(bootstrap, {topic: 6, f"{topic}-idle": 1}))
    app = yaml.safe_load(app_yaml(workdir, bootstrap, url, table, topic, 0).read_text())
    app["singletons"] = {"session_timeout_ms": session_timeout_ms}
    paths = [workdir / f"{table}-{n}.yaml" for n in range(3)]
    for path in paths:
        path.write_text(yaml.safe_dump(app))
    processes = [RuntimeProcess(path) for path in paths]

    async def measure() -> dict[str, float]:
        owner = await steady(processes)
        stop = asyncio.Event()
        writer = asyncio.create_task(write_rows(url, table, stop))
        await asyncio.sleep(KILL_AFTER_S)
        owner.process.send_signal(signal.SIGKILL)
        killed_at = time.time()
        owner.process.wait()
        visible = await first_visible_after(bootstrap, topic, killed_at, session_timeout_ms / 1000 + 60)
        stop.set()
        await writer
        elected = [at for process in processes if process is not owner and (at := elected_at(process, killed_at))]
        if len(elected) != 1:
            raise RuntimeError(f"{len(elected)} processes took over; logs {[str(p.log_path) for p in processes]}")
        return {"takeover_s": visible - killed_at, "election_s": elected[0] - killed_at}

    try:
        return asyncio.run(measure())
    finally:
        for process in processes:
            process.terminate()
        asyncio.run(delete_topics(bootstrap, [topic, f"{topic}-idle"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.singleton", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=6_000)
    parser.add_argument("--bootstrap")
    parser.add_argument("--database")
    args = parser.parse_args(argv)
    workdir = run_directory("singleton")
    result: dict[str, Any] = {"session_timeout_ms": args.session_timeout_ms, "runs": []}
    with kafka(args.bootstrap) as bootstrap, postgres(args.database) as url:
        for run in range(args.runs):
            measured = one_run(bootstrap, url, args.session_timeout_ms, workdir)
            result["runs"].append(measured)
            print(f"run {run + 1}: records again {measured['takeover_s']:.2f} s after the kill "
                  f"(new owner elected after {measured['election_s']:.2f} s)", flush=True)  # fmt: skip
    result["medians"] = {key: median([run[key] for run in result["runs"]]) for key in ("takeover_s", "election_s")}
    medians = result["medians"]
    print(
        f"median: takeover {medians['takeover_s']:.2f} s, election {medians['election_s']:.2f} s "
        f"(session timeout {args.session_timeout_ms} ms)"
    )
    print(f"figures in {write_result(workdir, 'result.json', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
