"""Restarting one of three workers, with and without static membership (`kafka.group_instance_id`):
how long its partitions stand still, whether the other two stop their tasks, and whether it restores.

`python -m bench.static_restart [--runs 3] [--rate 300] [--partitions 6] [--session-timeout-ms 30000]`

Three `python -m runtime` processes of one counting app (a RocksDB store with a changelog), each with
a state directory of its own as on separate hosts, read an input fed at `--rate` records/s. One is
stopped with SIGTERM and started again as soon as it has exited. Its outputs name the incarnation
that wrote them and when (`bench.processors:StampedCount`), so the pause is the time from its SIGTERM
to the earliest output of the new incarnation; the other two's stall is the longest time either
wrote nothing from then on (at 300 records/s each writes every few milliseconds otherwise), and
each `revoked` line they log after the SIGTERM counts. The restarted one restored when it logs
`restoring store`, and found its store current when it logs `is up to date`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgpack
import yaml
from aiokafka import AIOKafkaConsumer

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.load import PacedProducer
from bench.stateful import count_store
from bench.stats import median, run_directory, write_result

WORKERS = ("w0", "w1", "w2")
RESTARTED = "w0"
VARIANTS = ("dynamic", "static")
SETTLE_S = 5.0  # after the restarted worker's first output, for the rebalances its return causes


@dataclass(frozen=True)
class Restart:
    """One restart: the pause of the restarted worker, the others' `revoked` lines, what it restored."""

    pause_s: float
    exit_s: float  # from its SIGTERM until the old process exited
    others_stall_s: float  # the longest time either of the other two wrote nothing, from the SIGTERM on
    others_revoked: int
    restored_partitions: int
    up_to_date_partitions: int


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.static_restart", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=300.0, help="input records per second")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--session-timeout-ms", type=int, default=30_000)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


class Outputs:
    """Reads the output topic as it grows: per worker incarnation, the earliest time it processed a record."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", enable_auto_commit=False
        )
        self.first: dict[str, float] = {}
        self.times: dict[str, list[float]] = {}

    async def __aenter__(self) -> Outputs:
        await self._consumer.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._consumer.stop()

    async def poll(self) -> None:
        for records in (await self._consumer.getmany(timeout_ms=100)).values():
            for record in records:
                value = msgpack.unpackb(record.value)
                worker, at = str(value["worker"]), float(value["at"])
                self.first[worker] = min(at, self.first.get(worker, at))
                self.times.setdefault(worker, []).append(at)

    def longest_gap(self, worker: str, start: float) -> float:
        """The longest time from `start` on in which `worker` wrote nothing: how long it stood still."""
        times = sorted([start, *(at for at in self.times.get(worker, []) if at >= start)])
        return max(later - earlier for earlier, later in pairwise(times))

    async def wait_for(self, workers: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(worker in self.first for worker in workers):
            if time.monotonic() > deadline:
                missing = [worker for worker in workers if worker not in self.first]
                raise RuntimeError(f"no output from {missing} within {timeout_s:.0f}s")
            await self.poll()

    async def drain_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await self.poll()


def worker_yaml(base: dict[str, Any], variant: str, worker: str, incarnation: str, workdir: Path) -> Path:
    """The app as `worker` runs it: its own state directory, its static id under `static`, outputs tagged."""
    app = yaml.safe_load(yaml.safe_dump(base))
    app["state_dir"] = str(workdir / f"{app['app_id']}-{worker}-state")
    if variant == "static":
        app["kafka"]["group_instance_id"] = worker
    app["processors"][0]["params"]["worker"] = incarnation
    path = workdir / f"{app['app_id']}-{incarnation}.yaml"
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    return path


def lines_after(process: RuntimeProcess, moment: float, text: str) -> int:
    return sum(1 for when, line in process.timed_lines() if when.timestamp() >= moment and text in line)


def one_restart(bootstrap: str, variant: str, args: argparse.Namespace, workdir: Path) -> Restart:
    suffix = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"bench-in-{suffix}", f"bench-out-{suffix}"
    asyncio.run(create_topics(bootstrap, {input_topic: args.partitions, output_topic: args.partitions}))
    spec = AppSpec(
        app_id=f"bench-restart-{variant}-{suffix}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=output_topic,
        partitions=args.partitions,
        processor_class="bench.processors:StampedCount",
        processor_name="count",
        stores=count_store("rocksdb"),
    )
    base = spec.to_yaml()
    base["kafka"]["consumer"] = {"session_timeout_ms": args.session_timeout_ms, "rebalance_timeout_ms": 20_000}
    processes = {w: RuntimeProcess(worker_yaml(base, variant, w, f"{w}-1", workdir)) for w in WORKERS}

    async def measure() -> Restart:
        producer = PacedProducer(bootstrap, input_topic, args.partitions, args.rate)
        feeding = asyncio.create_task(producer.run())
        try:
            async with Outputs(bootstrap, output_topic) as outputs:
                await outputs.wait_for([f"{w}-1" for w in WORKERS], timeout_s=180)
                await outputs.drain_for(SETTLE_S)  # the joins' rebalances are over
                old = processes[RESTARTED]
                stopped_at = time.time()
                exit_code = await asyncio.to_thread(old.terminate)
                exited_at = time.time()
                if exit_code != 0:
                    raise RuntimeError(f"{RESTARTED} exited with {exit_code} on SIGTERM; log {old.log_path}")
                new = RuntimeProcess(worker_yaml(base, variant, RESTARTED, f"{RESTARTED}-2", workdir))
                processes[f"{RESTARTED}-2"] = new
                await outputs.wait_for([f"{RESTARTED}-2"], timeout_s=args.session_timeout_ms / 1000 + 120)
                await outputs.drain_for(SETTLE_S)
                others = [processes[w] for w in WORKERS if w != RESTARTED]
                stall = max(outputs.longest_gap(f"{w}-1", stopped_at) for w in WORKERS if w != RESTARTED)
                return Restart(
                    pause_s=outputs.first[f"{RESTARTED}-2"] - stopped_at,
                    exit_s=exited_at - stopped_at,
                    others_stall_s=stall,
                    others_revoked=sum(lines_after(p, stopped_at, "revoked ") for p in others),
                    restored_partitions=lines_after(new, stopped_at, "restoring store"),
                    up_to_date_partitions=lines_after(new, stopped_at, "is up to date"),
                )
        finally:
            producer.stop.set()
            await feeding

    try:
        return asyncio.run(measure())
    finally:
        for process in processes.values():
            process.terminate()
        for worker in WORKERS:
            shutil.rmtree(workdir / f"{spec.app_id}-{worker}-state", ignore_errors=True)
        asyncio.run(delete_topics(bootstrap, [input_topic, output_topic, f"{spec.app_id}-counts-changelog"]))


def describe(restart: Restart) -> str:
    return (
        f"pause {restart.pause_s:5.2f} s (exit {restart.exit_s:4.2f} s), "
        f"others stalled {restart.others_stall_s:5.2f} s and revoked {restart.others_revoked}x, "
        f"restored {restart.restored_partitions} partitions, {restart.up_to_date_partitions} up to date"
    )


def main() -> None:
    args = parse_args()
    workdir = run_directory("static_restart")
    runs: dict[str, list[Restart]] = {variant: [] for variant in VARIANTS}
    with kafka(args.bootstrap) as bootstrap:
        for number in range(1, args.runs + 1):
            for variant in VARIANTS:
                restart = one_restart(bootstrap, variant, args, workdir)
                runs[variant].append(restart)
                print(f"run {number}/{args.runs} {variant:7}: {describe(restart)}", flush=True)
    summary = {
        variant: {
            "pause_s": median([r.pause_s for r in restarts]),
            "exit_s": median([r.exit_s for r in restarts]),
            "others_stall_s": median([r.others_stall_s for r in restarts]),
            "others_revoked": median([r.others_revoked for r in restarts]),
            "restored_partitions": median([r.restored_partitions for r in restarts]),
            "up_to_date_partitions": median([r.up_to_date_partitions for r in restarts]),
        }
        for variant, restarts in runs.items()
    }
    print(f"median of {args.runs}, {len(WORKERS)} workers, {args.partitions} partitions, {args.rate:,.0f} rec/s in:")
    for variant, figures in summary.items():
        print(
            f"  {variant:7}: pause {figures['pause_s']:.2f} s (exit {figures['exit_s']:.2f} s), others stalled "
            f"{figures['others_stall_s']:.2f} s and revoked "
            f"{figures['others_revoked']:g}x, restored {figures['restored_partitions']:g} partitions, "
            f"{figures['up_to_date_partitions']:g} up to date"
        )
    path = write_result(
        workdir,
        "static_restart",
        {
            "rate": args.rate,
            "partitions": args.partitions,
            "session_timeout_ms": args.session_timeout_ms,
            "runs": {variant: list(map(asdict, restarts)) for variant, restarts in runs.items()},
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
