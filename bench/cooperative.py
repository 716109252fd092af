"""Scaling out from two workers to three, `rebalance: cooperative` against `eager`: how much the tasks that
do not move go on processing while the group rebalances.

`python -m bench.cooperative [--runs 3] [--rate 600] [--partitions 6]`

Two `python -m runtime` processes of one counting app (a RocksDB store with a changelog), each with a state
directory of its own, read an input fed at `--rate` records/s; once both write, a third starts. Every
output names the worker that wrote it and when (`bench.processors:StampedCount`), and lands in the output
partition of its input's (same key, same partition count). A task is unmoved when the worker that wrote
its partition's outputs last before the third started writes them again after the group settled. The
rebalance lasts from the moment the first two hear of it (aiokafka's `because it is rebalancing`) to the
third's first output; the figures are the outputs the unmoved tasks wrote in that span (and per second of
it), and the longest time any unmoved task wrote nothing from that moment until the group settled.
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

FIRST, JOINING = ("w0", "w1"), "w2"
VARIANTS = ("eager", "cooperative")
SETTLE_S = 5.0


@dataclass(frozen=True)
class ScaleOut:
    rebalance_s: float  # from the first two hearing of the rebalance to the third's first output
    unmoved_tasks: int
    unmoved_outputs: int  # what the unmoved tasks wrote while the group rebalanced
    unmoved_per_s: float
    unmoved_stall_s: float  # the longest time an unmoved task wrote nothing, from the rebalance's start on


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cooperative", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=600.0, help="input records per second")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


class Outputs:
    """The output topic as it grows: when each worker wrote each partition's outputs."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", enable_auto_commit=False
        )
        self.times: dict[tuple[str, int], list[float]] = {}

    async def __aenter__(self) -> Outputs:
        await self._consumer.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._consumer.stop()

    async def poll(self) -> None:
        for tp, records in (await self._consumer.getmany(timeout_ms=100)).items():
            for record in records:
                value = msgpack.unpackb(record.value)
                self.times.setdefault((str(value["worker"]), tp.partition), []).append(float(value["at"]))

    def first(self, worker: str) -> float | None:
        return min((min(at) for (w, _), at in self.times.items() if w == worker), default=None)

    def writer(self, partition: int, before: float | None = None, after: float | None = None) -> str | None:
        """The worker that wrote the partition's last output before `before`, or its first after `after`."""
        found = [
            (at, worker)
            for (worker, p), times in self.times.items()
            if p == partition
            for at in times
            if (before is None or at < before) and (after is None or at > after)
        ]
        if not found:
            return None
        return (max(found) if before is not None else min(found))[1]

    def written(self, worker: str, partition: int, start: float, end: float) -> list[float]:
        return [at for at in self.times.get((worker, partition), []) if start <= at <= end]

    async def wait_for(self, workers: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(self.first(worker) is not None for worker in workers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no output from all of {workers} within {timeout_s:.0f}s")
            await self.poll()

    async def drain_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await self.poll()


def worker_yaml(base: dict[str, Any], worker: str, workdir: Path) -> Path:
    app = yaml.safe_load(yaml.safe_dump(base))
    app["state_dir"] = str(workdir / f"{app['app_id']}-{worker}-state")
    app["processors"][0]["params"]["worker"] = worker
    path = workdir / f"{app['app_id']}-{worker}.yaml"
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    return path


def rebalance_start(processes: list[RuntimeProcess], after: float) -> float:
    """When the first of `processes` heard of the rebalance, as aiokafka logs it."""
    heard = [
        when.timestamp()
        for process in processes
        for when, line in process.timed_lines()
        if when.timestamp() >= after and "because it is rebalancing" in line
    ]
    if not heard:
        raise RuntimeError("the workers never logged the rebalance")
    return min(heard)


def one_scale_out(bootstrap: str, variant: str, args: argparse.Namespace, workdir: Path) -> ScaleOut:
    suffix = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"bench-in-{suffix}", f"bench-out-{suffix}"
    asyncio.run(create_topics(bootstrap, {input_topic: args.partitions, output_topic: args.partitions}))
    spec = AppSpec(
        app_id=f"bench-{variant}-{suffix}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=output_topic,
        partitions=args.partitions,
        processor_class="bench.processors:StampedCount",
        processor_name="count",
        stores=count_store("rocksdb"),
    )
    base = {**spec.to_yaml(), "rebalance": variant}
    processes = {w: RuntimeProcess(worker_yaml(base, w, workdir)) for w in FIRST}

    async def measure() -> ScaleOut:
        producer = PacedProducer(bootstrap, input_topic, args.partitions, args.rate)
        feeding = asyncio.create_task(producer.run())
        try:
            async with Outputs(bootstrap, output_topic) as outputs:
                await outputs.wait_for(list(FIRST), timeout_s=180)
                await outputs.drain_for(SETTLE_S)  # the two joins' rebalances are over
                started = time.time()
                processes[JOINING] = RuntimeProcess(worker_yaml(base, JOINING, workdir))
                await outputs.wait_for([JOINING], timeout_s=180)
                await outputs.drain_for(SETTLE_S)
                joined = outputs.first(JOINING)
                assert joined is not None
                settled = time.time()
                unmoved = [
                    (worker, p)
                    for p in range(args.partitions)
                    if (worker := outputs.writer(p, before=started)) is not None
                    and outputs.writer(p, after=settled - SETTLE_S / 2) == worker
                ]
                begun = rebalance_start([processes[w] for w in FIRST], started)
                during = sum(len(outputs.written(w, p, begun, joined)) for w, p in unmoved)
                stall = max(
                    max(b - a for a, b in pairwise([begun, *outputs.written(w, p, begun, settled), settled]))
                    for w, p in unmoved
                )
                return ScaleOut(
                    rebalance_s=joined - begun,
                    unmoved_tasks=len(unmoved),
                    unmoved_outputs=during,
                    unmoved_per_s=during / (joined - begun),
                    unmoved_stall_s=stall,
                )
        finally:
            producer.stop.set()
            await feeding

    try:
        return asyncio.run(measure())
    finally:
        for process in processes.values():
            process.terminate()
        for worker in (*FIRST, JOINING):
            shutil.rmtree(workdir / f"{spec.app_id}-{worker}-state", ignore_errors=True)
        asyncio.run(delete_topics(bootstrap, [input_topic, output_topic, f"{spec.app_id}-counts-changelog"]))


def describe(scale_out: ScaleOut) -> str:
    return (
        f"rebalance {scale_out.rebalance_s:5.2f} s, {scale_out.unmoved_tasks} unmoved tasks wrote "
        f"{scale_out.unmoved_outputs:5d} outputs meanwhile ({scale_out.unmoved_per_s:6.1f}/s), "
        f"longest stall {scale_out.unmoved_stall_s:5.2f} s"
    )


def main() -> None:
    args = parse_args()
    workdir = run_directory("cooperative")
    runs: dict[str, list[ScaleOut]] = {variant: [] for variant in VARIANTS}
    with kafka(args.bootstrap) as bootstrap:
        for number in range(1, args.runs + 1):
            for variant in VARIANTS:  # side by side, so both see the same load of the machine
                scale_out = one_scale_out(bootstrap, variant, args, workdir)
                runs[variant].append(scale_out)
                print(f"run {number}/{args.runs} {variant:11}: {describe(scale_out)}", flush=True)
    summary = {
        variant: {field: median([getattr(s, field) for s in outs]) for field in ScaleOut.__dataclass_fields__}
        for variant, outs in runs.items()
    }
    print(f"median of {args.runs}, 2 -> 3 workers, {args.partitions} partitions, {args.rate:,.0f} rec/s in:")
    for variant, figures in summary.items():
        print(
            f"  {variant:11}: rebalance {figures['rebalance_s']:.2f} s, unmoved tasks wrote "
            f"{figures['unmoved_outputs']:g} outputs meanwhile ({figures['unmoved_per_s']:.1f}/s), "
            f"longest stall {figures['unmoved_stall_s']:.2f} s"
        )
    eager, cooperative = summary["eager"], summary["cooperative"]
    if eager["unmoved_per_s"] > 0:
        ratio = cooperative["unmoved_per_s"] / eager["unmoved_per_s"]
        print(f"  cooperative / eager, unmoved tasks' outputs per second of the rebalance: {ratio:.1f}x")
    if cooperative["unmoved_stall_s"] > 0:
        ratio = eager["unmoved_stall_s"] / cooperative["unmoved_stall_s"]
        print(f"  eager / cooperative, unmoved tasks' longest stall: {ratio:.1f}x")
    path = write_result(
        workdir,
        "cooperative",
        {
            "rate": args.rate,
            "partitions": args.partitions,
            "runs": {variant: list(map(asdict, outs)) for variant, outs in runs.items()},
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
