"""A processor that awaits I/O, with records in flight together: `concurrency: {max_in_flight: N, order: key}`.

Each record awaits a lookup of `--wait-ms` (10 ms: a database or HTTP call) before it is sent on. Cases:
`one-at-a-time` (no `concurrency:`, the default: one record per partition at a time), `in-flight-N` for
each `--in-flight` N (key order), and `no-await`, the same processor with no wait and no concurrency: the
CPU a record costs when nothing is awaited, which the awaiting cases' CPU per record is compared with.

`python -m bench.concurrency [--records 100000] [--one-at-a-time-records 20000] [--keys 10000]
[--partitions 6] [--in-flight 100 1000] [--runs 3] [--commit-interval-ms MS] [--cases NAME ...]
[--bootstrap HOST:PORT]`: `--commit-interval-ms` shows what the drain at each commit costs.

One at a time, 100,000 records of 10 ms over 6 partitions take about three minutes a run; its rate does
not depend on the number of records, so it reads `--one-at-a-time-records` of them (the first ones of
the same input).
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.app import REPO_ROOT, AppSpec
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, fresh_output, median_of, run_app


@dataclass(frozen=True)
class Case:
    name: str
    wait_ms: float
    concurrency: dict[str, Any] | None = None


def cases(in_flight: list[int], wait_ms: float) -> list[Case]:
    return [
        Case("one-at-a-time", wait_ms),
        *(Case(f"in-flight-{n}", wait_ms, {"max_in_flight": n, "order": "key"}) for n in in_flight),
        Case("no-await", 0),
    ]


@dataclass
class CaseRuns:
    case: Case
    records: int
    runs: list[Measurement] = field(default_factory=list)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--one-at-a-time-records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--wait-ms", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--commit-interval-ms", type=int, help="the apps' commit interval (default: the runtime's)")
    parser.add_argument("--cases", nargs="+", help="only these cases (one-at-a-time, in-flight-N, no-await)")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def run_case(
    case: Case, bootstrap: str, topic: str, partitions: int, records: int, workdir: Path, commit_interval_ms: int | None
) -> Measurement:
    """One process with a fresh app id and output topic, over the whole of `topic` (`records` records)."""
    spec = AppSpec(
        app_id=f"bench-concurrency-{case.name}-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=topic,
        output_topic=asyncio.run(fresh_output(bootstrap, partitions)),
        partitions=partitions,
        processor_class="bench.processors:Lookup",
        params={"wait_ms": case.wait_ms},
        concurrency=case.concurrency,
        extra={} if commit_interval_ms is None else {"commit_interval_ms": commit_interval_ms},
    )
    measured, _ = run_app(spec, workdir, records)
    asyncio.run(delete_topics(bootstrap, [spec.output_topic]))
    return measured


def summary(results: dict[str, CaseRuns]) -> dict[str, dict[str, float | None]]:
    """Per case: medians of records/s (wall clock and processing span) and of CPU microseconds per record;
    the ratio of each rate to one at a time, and of each CPU per record to no-await's."""
    medians: dict[str, dict[str, float | None]] = {}
    for name, done in results.items():
        medians[name] = {
            "records": done.records,
            "rate": median([m.rate(done.records) for m in done.runs]),
            "processing_rate": median_of(m.inner_rate(done.records) for m in done.runs),
            "cpu_us_per_record": median_of(
                m.cpu_seconds * 1e6 / done.records if m.cpu_seconds else None for m in done.runs
            ),
        }
    one, bare = medians.get("one-at-a-time"), medians.get("no-await")
    for figures in medians.values():
        if one and one["processing_rate"] and figures["processing_rate"]:
            figures["x_one_at_a_time"] = figures["processing_rate"] / one["processing_rate"]
        if bare and bare["cpu_us_per_record"] and figures["cpu_us_per_record"]:
            figures["cpu_x_no_await"] = figures["cpu_us_per_record"] / bare["cpu_us_per_record"]
    return medians


def print_summary(medians: dict[str, dict[str, float | None]], runs: int) -> None:
    print(f"median of {runs} run(s): records/s wall clock (start-up included) | processing span; CPU µs per "
          "record; processing rate over one at a time's; CPU per record over no-await's")  # fmt: skip
    for name, figures in medians.items():
        speedup, cpu = figures.get("x_one_at_a_time") or 0, figures.get("cpu_x_no_await") or 0
        print(f"  {name:<15}{figures['records']:>9,.0f} records {figures['rate']:>9,.0f} | "
              f"{figures['processing_rate'] or 0:>9,.0f} rec/s  {figures['cpu_us_per_record'] or 0:>7.1f} µs  "
              f"x{speedup:>7.1f}  cpu x{cpu:.2f}")  # fmt: skip


async def cut(bootstrap: str, topic: str, partitions: int, records: int) -> str:
    """A topic holding the first `records` of `topic`, as many of each partition, in the same partitions."""
    target = f"bench-in-cut-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, {target: partitions})
    per_partition = records // partitions
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        for tp in tps:
            copied = 0
            while copied < per_partition:
                batch = await consumer.getmany(tp, timeout_ms=1000, max_records=per_partition - copied)
                for record in batch.get(tp, []):
                    await producer.send(target, record.value, key=record.key, partition=tp.partition,
                                        timestamp_ms=record.timestamp)  # fmt: skip
                    copied += 1
        await producer.flush()
    finally:
        await consumer.stop()
        await producer.stop()
    return target


def main() -> None:
    args = parse_args()
    workdir = run_directory("concurrency")
    chosen = [case for case in cases(args.in_flight, args.wait_ms) if not args.cases or case.name in args.cases]
    cut_records = args.one_at_a_time_records // args.partitions * args.partitions  # as many of each partition
    results = {
        case.name: CaseRuns(case, cut_records if case.name == "one-at-a-time" else args.records) for case in chosen
    }
    with kafka(args.bootstrap) as bootstrap:
        topic = f"bench-in-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topics(bootstrap, {topic: args.partitions}))
        print(f"filling {topic} ({args.partitions} partitions): {args.records:,} records over {args.keys:,} keys")
        asyncio.run(fill_topic(bootstrap, topic, args.records, args.partitions, args.keys))
        short = asyncio.run(cut(bootstrap, topic, args.partitions, args.one_at_a_time_records))
        topics = {name: short if done.records < args.records else topic for name, done in results.items()}
        for number in range(1, args.runs + 1):
            for case in chosen:
                done = results[case.name]
                measured = run_case(case, bootstrap, topics[case.name], args.partitions, done.records, workdir,
                                    args.commit_interval_ms)  # fmt: skip
                done.runs.append(measured)
                print(f"run {number}/{args.runs} {case.name:<15}{measured.wall_seconds:7.2f} s, "
                      f"{measured.inner_rate(done.records) or 0:9,.0f} rec/s processing, "
                      f"cpu {measured.cpu_seconds or 0:.2f} s, {measured.records_out:,} outputs")  # fmt: skip
        medians = summary(results)
        print_summary(medians, args.runs)
        asyncio.run(delete_topics(bootstrap, [topic, short]))
    path = write_result(
        workdir,
        "concurrency",
        {"arguments": vars(args), "cases": [asdict(case) for case in chosen],
         "runs": {name: [asdict(m) for m in done.runs] for name, done in results.items()}, "median": medians},
    )  # fmt: skip
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
