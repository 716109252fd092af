"""Store queries while the app processes at full rate: their latency and rate, for keys the asked worker owns
(local) and keys it asks the owner for (routed), and what they cost the processing rate.

`python -m bench.queries [--records 300000] [--keys 10000] [--runs 3] [--partitions 6] [--concurrency 8]
[--idle-s 3] [--pause-at N] [--guarantee exactly_once] [--bootstrap HOST:PORT]`

Each of the `--runs` rounds runs the counting app (`CountPerKey`, a RocksDB store of str keys with a
changelog) three times under `--workers 2`, each with a new app id and input topic, in an order rotated from
round to round: without queries; with a client keeping `--concurrency` queries in flight to worker 0 for keys
of the partitions it owns (local); and for keys of worker 1's partitions, which worker 0 asks worker 1 for
(routed). Which worker owns a partition is learnt from the answers, which name the worker that read them. The
input is written in one transaction, left open until both workers were assigned their share (the runtime reads
read_committed, so it sees none of it), then committed: the workers process it at full rate from there, and
the processing time ends when the group's committed offsets reach its last record. The queries are asked, and
counted, over that time only; then for `--idle-s` more against the idle workers: their baseline, under the
same load of the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess
from bench.broker import create_topics, delete_topics, end_offsets, kafka
from bench.data import BATCH_BYTES, BatchProducer, make_key, make_value
from bench.stats import median, percentile, run_directory, write_result
from bench.throughput import finish_output, fresh_output
from runtime.devkafka.broker import free_port, port_is_free
from stores.partitioner import partition_for

STORE = "counts"
VARIANTS = ("none", "local", "routed")
MOVED = re.compile(r"\[(\d+)\] (assigned|revoked) (\d+) partitions")  # the worker's pid, how many came or went


@dataclass
class Answers:
    """The queries of one run: the latency of each answered one, by whether the worker asked read it itself."""

    local: list[float] = field(default_factory=list)
    routed: list[float] = field(default_factory=list)
    unanswered: Counter[str] = field(default_factory=Counter)  # 503s by their reason: rebalancing, restoring...
    seconds: float = 0.0  # the window the answers were counted in

    def summary(self) -> dict[str, float]:
        answered = len(self.local) + len(self.routed)
        figures = {"qps": answered / self.seconds if self.seconds else 0.0, "answered": answered}
        for kind, latencies in (("local", sorted(self.local)), ("routed", sorted(self.routed))):
            figures |= {f"{kind}_count": len(latencies), f"{kind}_p50_ms": percentile(latencies, 0.5) * 1_000}
            figures[f"{kind}_p99_ms"] = percentile(latencies, 0.99) * 1_000
        return figures | {"unanswered": sum(self.unanswered.values())}


@dataclass(frozen=True)
class Run:
    variant: str
    processing_seconds: float
    answers: dict[str, float]
    idle_answers: dict[str, float]
    unanswered: dict[str, int]  # while processing, by reason

    def rate(self, records: int) -> float:
        return records / self.processing_seconds


class QueryLoad:
    """`concurrency` queries in flight to one worker, each for a key of a partition it owns, or of one it does not."""

    def __init__(self, port: int, keys: int, partitions: int, local: bool, concurrency: int):
        self.address = f"127.0.0.1:{port}"
        self._local = local
        self._concurrency = concurrency
        self._keys: dict[int, list[str]] = defaultdict(list)
        for index in range(keys):
            key = make_key(index, keys)
            self._keys[partition_for(key.encode(), partitions)].append(key)
        self._owned_here: dict[int, bool] = {}  # by partition, as the answers tell
        self.busy = Answers()  # while the workers process
        self.idle = Answers()  # once they have processed it all: the same queries' baseline, under the same load
        self._counted = self.busy
        self._done = False

    async def run(self, processing: asyncio.Task[float], idle_s: float) -> None:
        """Asked until `processing` is done, then `idle_s` more."""
        connector = aiohttp.TCPConnector(limit=self._concurrency, force_close=True)  # the server closes each
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
            asking = asyncio.gather(*(self._ask(session) for _ in range(self._concurrency)))
            self.busy.seconds = await processing
            self._counted = self.idle  # an answer asked while processing but told after goes uncounted
            await asyncio.sleep(idle_s)
            self._done = True
            await asking
            self.idle.seconds = idle_s

    def _key(self) -> str:
        wanted = [p for p, here in self._owned_here.items() if here == self._local]
        return random.choice(self._keys[random.choice(wanted or list(self._keys))])

    async def _ask(self, session: aiohttp.ClientSession) -> None:
        while not self._done:
            counted = self._counted
            started = time.perf_counter()
            try:
                async with session.get(f"http://{self.address}/stores/{STORE}/{self._key()}") as reply:
                    body: dict[str, Any] = await reply.json()
            except aiohttp.ClientError:
                body = {}
            seconds = time.perf_counter() - started
            if counted is not self._counted or self._done:
                continue
            if "worker" not in body:
                counted.unanswered[re.sub(r"\d+", "N", str(body.get("error", "no answer")))] += 1
                await asyncio.sleep(0.01)  # rebalancing or restoring: asked again soon, not in a spin
                continue
            here = body["worker"] == self.address
            self._owned_here[body["partition"]] = here
            (counted.local if here else counted.routed).append(seconds)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.queries", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys in the input")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=8, help="queries in flight")
    parser.add_argument("--idle-s", type=float, default=3.0, help="queries asked once the input is processed")
    parser.add_argument(
        "--pause-at",
        type=int,
        help="the app's queue.pause_at (resume_at a quarter): the records a step takes",
    )
    parser.add_argument("--guarantee", default="exactly_once", choices=["at_least_once", "exactly_once"])
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def queue(args: argparse.Namespace) -> dict[str, Any]:
    """The app's `queue:` bounds when `--pause-at` sets them: a task's step processes what its queue holds."""
    if args.pause_at is None:
        return {}
    return {"queue": {"pause_at": args.pause_at, "resume_at": args.pause_at // 4}}


def health_port() -> int:
    """A free port whose next is free too: worker i of `--workers 2` serves on the port plus i."""
    while not port_is_free((port := free_port()) + 1):
        pass
    return port


def run_one(variant: str, bootstrap: str, args: argparse.Namespace, workdir: Path) -> Run:
    """The counting app of two workers over an input it sees all at once: held in an open transaction (the
    runtime reads read_committed) until each worker was assigned its share, then committed."""
    port = health_port()
    input_topic = f"bench-in-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
    state_dir = workdir / "state"
    spec = AppSpec(
        app_id=f"bench-queries-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)),
        partitions=args.partitions,
        processor_class="bench.processors:CountPerKey",
        guarantee=args.guarantee,
        processor_name="count",
        stores={STORE: {"backend": "rocksdb", "changelog": True, "key_serde": "str"}},
        extra={"state_dir": str(state_dir), "health": {"host": "127.0.0.1", "port": port}, "queries": {}} | queue(args),
    )
    process = RuntimeProcess(spec.write(workdir), "--workers", "2")
    load = QueryLoad(port, args.keys, args.partitions, variant == "local", args.concurrency)
    try:
        processing = asyncio.run(process_input(spec, process, None if variant == "none" else load, args))
    finally:
        code = process.terminate()
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    records_out = asyncio.run(finish_output(bootstrap, spec.output_topic))
    if records_out < args.records:
        raise RuntimeError(f"{spec.app_id} wrote {records_out} of {args.records} records; log {process.log_path}")
    shutil.rmtree(state_dir / spec.app_id, ignore_errors=True)
    asyncio.run(delete_topics(bootstrap, [input_topic, f"{spec.app_id}-{STORE}-changelog"]))
    return Run(variant, processing, load.busy.summary(), load.idle.summary(), dict(load.busy.unanswered))


async def process_input(
    spec: AppSpec, process: RuntimeProcess, load: QueryLoad | None, args: argparse.Namespace
) -> float:
    """Seconds from the input's commit until the group committed every record of it, queries asked meanwhile."""
    producer = AIOKafkaProducer(
        bootstrap_servers=spec.bootstrap,
        transactional_id=f"{spec.app_id}-input",
        max_batch_size=BATCH_BYTES,
        max_request_size=4 * BATCH_BYTES,
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        out = BatchProducer(producer, spec.input_topic, spec.partitions)
        for index in range(args.records):
            key = make_key(index, args.keys).encode()
            await out.append(key, msgpack.packb(make_value(index, args.keys)))
        await out.flush()
        await shares_assigned(process, spec.partitions)
        await producer.commit_transaction()
    finally:
        await producer.stop()
    processing = asyncio.create_task(all_committed(spec.bootstrap, spec.app_id, spec.input_topic, process))
    if load is not None:
        await load.run(processing, args.idle_s)
    return await processing


async def shares_assigned(process: RuntimeProcess, partitions: int) -> None:
    """Until both workers hold a share of the partitions, as their logs of what they were assigned and what
    was revoked add up (a cooperative rebalance logs only the partitions that move)."""
    while True:
        if not process.running():
            raise RuntimeError(f"the runtime exited; log {process.log_path}:\n{process.log_tail()}")
        shares: Counter[str] = Counter()
        for found in MOVED.finditer(process.log()):
            pid, moved, count = found.groups()
            shares[pid] += int(count) if moved == "assigned" else -int(count)
        held = [share for share in shares.values() if share]
        if len(held) == 2 and sum(held) == partitions and max(held) < partitions:
            return
        await asyncio.sleep(0.2)


async def all_committed(bootstrap: str, group: str, topic: str, process: RuntimeProcess) -> float:
    """Seconds until the group's committed offsets reach each partition's last record (the end is the commit
    marker)."""
    started = time.perf_counter()
    ends = await end_offsets(bootstrap, topic)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        while True:
            if not process.running():
                raise RuntimeError(f"the runtime exited; log {process.log_path}:\n{process.log_tail()}")
            committed = await admin.list_consumer_group_offsets(group)
            reached = {tp.partition: offset.offset for tp, offset in committed.items() if tp.topic == topic}
            if all(reached.get(partition, -1) >= end - 1 for partition, end in ends.items()):
                return time.perf_counter() - started
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


def describe(run: Run, records: int, baseline: Run) -> str:
    line = f"{run.variant:6}: processing {run.processing_seconds:6.2f} s = {run.rate(records):8,.0f} rec/s"
    line += f" ({run.rate(records) / baseline.rate(records):.2f} of none)"
    if run.variant == "none":
        return line
    kind, busy, idle = run.variant, run.answers, run.idle_answers
    return (
        f"{line}; {busy['qps']:5,.0f} queries/s, {kind} p50 {busy[f'{kind}_p50_ms']:.1f} ms "
        f"p99 {busy[f'{kind}_p99_ms']:.1f} ms ({busy[f'{kind}_count']:,.0f} {kind}, "
        f"{busy['answered'] - busy[f'{kind}_count']:,.0f} other, {busy['unanswered']:,.0f} unanswered); idle "
        f"{idle['qps']:5,.0f} queries/s, p50 {idle[f'{kind}_p50_ms']:.1f} ms p99 {idle[f'{kind}_p99_ms']:.1f} ms"
        + "".join(f"\n    unanswered {count}: {reason}" for reason, count in run.unanswered.items())
    )


def main() -> None:
    args = parse_args()
    workdir = run_directory("queries")
    runs: list[dict[str, Run]] = []
    with kafka(args.bootstrap) as bootstrap:
        for number in range(1, args.runs + 1):
            order = VARIANTS[number % 3 :] + VARIANTS[: number % 3]  # rotated: none is not always first
            by_variant = {variant: run_one(variant, bootstrap, args, workdir) for variant in order}
            runs.append({variant: by_variant[variant] for variant in VARIANTS})
            for run in runs[-1].values():
                print(f"run {number}/{args.runs} {describe(run, args.records, runs[-1]['none'])}", flush=True)
    records = args.records
    summary: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        ratio = median([r[variant].rate(records) / r["none"].rate(records) for r in runs])
        summary[variant] = {"rate": median([r[variant].rate(records) for r in runs]), "ratio_to_none": ratio}
        if variant != "none":
            for figure in ("qps", f"{variant}_p50_ms", f"{variant}_p99_ms"):
                summary[variant][figure] = median([r[variant].answers[figure] for r in runs])
                summary[variant][f"idle_{figure}"] = median([r[variant].idle_answers[figure] for r in runs])
    print(
        f"median of {args.runs}, {args.guarantee}, {records:,} records, 2 workers, {args.concurrency} queries in "
        f"flight to worker 0 (idle: the same queries for {args.idle_s:.0f} s once the input was processed):"
    )
    for variant, figures in summary.items():
        line = f"  {variant:6}: {figures['rate']:8,.0f} rec/s, {figures['ratio_to_none']:.2f} of the rate without"
        if variant != "none":
            p50, p99 = f"{variant}_p50_ms", f"{variant}_p99_ms"
            line += (
                f"; {figures['qps']:,.0f} queries/s (idle {figures['idle_qps']:,.0f}), p50 {figures[p50]:.1f} ms "
                f"(idle {figures[f'idle_{p50}']:.1f}), p99 {figures[p99]:.1f} ms (idle {figures[f'idle_{p99}']:.1f})"
            )
        print(line)
    path = write_result(
        workdir,
        "queries",
        {
            "records": records,
            "keys": args.keys,
            "partitions": args.partitions,
            "concurrency": args.concurrency,
            "idle_s": args.idle_s,
            "guarantee": args.guarantee,
            "runs": [{variant: asdict(run) for variant, run in by_variant.items()} for by_variant in runs],
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
