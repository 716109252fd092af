"""End-to-end latency at a steady input rate: input produce -> runtime -> output consumed.

`python -m bench.latency [--rate 10000] [--seconds 30] [--warmup 10] [--runs 3] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import msgpack
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.load import PacedProducer
from bench.stats import median, percentile, run_directory, write_result

FIRST_OUTPUT_TIMEOUT = 120.0
DRAIN_TIMEOUT = 60.0


@dataclass(frozen=True)
class Latency:
    records: int
    missing: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__)
    parser.add_argument("--rate", type=float, default=10_000, help="input records per second")
    parser.add_argument("--seconds", type=float, default=30, help="measured time, after the warm-up")
    parser.add_argument("--warmup", type=float, default=10, help="seconds after the first output to ignore")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument("--commit-interval-ms", type=int, default=None, help="the app's commit_interval_ms")
    return parser.parse_args()


class OutputReader:
    """Reads the output topic from the start and keeps (sent, latency) of every record.

    It reads `read_committed`: under exactly-once a record counts once its transaction committed.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
        )
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.samples: list[tuple[float, float]] = []
        self.first_output = asyncio.Event()
        self.drained = asyncio.Event()
        self._expected: int | None = None

    def expect(self, count: int) -> None:
        """Set `drained` once `count` records have been read."""
        self._expected = count
        self._check()

    def _check(self) -> None:
        if self.samples:
            self.first_output.set()
        if self._expected is not None and len(self.samples) >= self._expected:
            self.drained.set()

    async def run(self, stop: asyncio.Event) -> None:
        await self._consumer.start()
        try:
            self._consumer.assign(self._tps)
            await self._consumer.seek_to_beginning(*self._tps)
            while not stop.is_set():
                batches = await self._consumer.getmany(timeout_ms=100)
                now = time.time()
                for records in batches.values():
                    for record in records:
                        sent = float(msgpack.unpackb(record.value)["sent"])
                        self.samples.append((sent, now - sent))
                self._check()
        finally:
            await self._consumer.stop()


async def measure(bootstrap: str, input_topic: str, output_topic: str, args: argparse.Namespace) -> Latency:
    producer = PacedProducer(bootstrap, input_topic, args.partitions, args.rate)
    reader = OutputReader(bootstrap, output_topic, args.partitions)
    stop_reading = asyncio.Event()
    tasks = [asyncio.create_task(producer.run()), asyncio.create_task(reader.run(stop_reading))]
    try:
        await asyncio.wait_for(reader.first_output.wait(), FIRST_OUTPUT_TIMEOUT)
        window_start = time.time() + args.warmup
        await asyncio.sleep(args.warmup + args.seconds)
        window_end = time.time()
        producer.stop.set()
        await tasks[0]
        reader.expect(producer.sent)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader.drained.wait(), DRAIN_TIMEOUT)
    finally:
        producer.stop.set()
        stop_reading.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    window = sorted(latency for sent, latency in reader.samples if window_start <= sent < window_end)
    expected = producer.sent_between(window_start, window_end)
    return Latency(
        records=len(window),
        missing=max(0, expected - len(window)),
        p50_ms=percentile(window, 0.50) * 1000,
        p99_ms=percentile(window, 0.99) * 1000,
        max_ms=(window[-1] if window else float("nan")) * 1000,
    )


def run_once(bootstrap: str, args: argparse.Namespace, workdir: Path) -> Latency:
    suffix = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"bench-lat-in-{suffix}", f"bench-lat-out-{suffix}"
    asyncio.run(create_topics(bootstrap, {input_topic: args.partitions, output_topic: args.partitions}))
    extra = {} if args.commit_interval_ms is None else {"commit_interval_ms": args.commit_interval_ms}
    spec = AppSpec(
        app_id=f"bench-latency-{suffix}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=output_topic,
        partitions=args.partitions,
        processor_class="bench.processors:Transform",
        guarantee=args.guarantee,
        extra=extra,
    )
    process = RuntimeProcess(spec.write(workdir))
    try:
        result = asyncio.run(measure(bootstrap, input_topic, output_topic, args))
    except TimeoutError:
        raise RuntimeError(f"no output from the runtime; log {process.log_path}:\n{process.log_tail()}") from None
    finally:
        code = process.terminate()
    if code != 0:
        print(f"  note: the runtime exited with {code} after SIGTERM; log {process.log_path}")
    asyncio.run(delete_topics(bootstrap, [input_topic, output_topic]))
    return result


def main() -> None:
    args = parse_args()
    workdir = run_directory("latency")
    runs: list[Latency] = []
    with kafka(args.bootstrap) as bootstrap:
        for run in range(1, args.runs + 1):
            result = run_once(bootstrap, args, workdir)
            runs.append(result)
            missing = f", {result.missing:,} missing" if result.missing else ""
            print(
                f"run {run}/{args.runs}: {result.records:,} records at {args.rate:,.0f}/s: "
                f"p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, max {result.max_ms:.1f} ms{missing}"
            )
    summary = {
        "p50_ms": median([r.p50_ms for r in runs]),
        "p99_ms": median([r.p99_ms for r in runs]),
        "max_ms": median([r.max_ms for r in runs]),
    }
    print(
        f"median of {args.runs}: p50 {summary['p50_ms']:.1f} ms, p99 {summary['p99_ms']:.1f} ms, "
        f"max {summary['max_ms']:.1f} ms"
    )
    path = write_result(
        workdir,
        "latency",
        {
            "rate": args.rate,
            "seconds": args.seconds,
            "warmup": args.warmup,
            "partitions": args.partitions,
            "guarantee": args.guarantee,
            "runs": [asdict(r) for r in runs],
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
