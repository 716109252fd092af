"""Peak memory with a processor ten times slower than its input: RSS must stay flat within the queue bounds.

`python -m bench.memory [--rate 10000] [--slowdown 10] [--seconds 60] [--warmup 15] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from dataclasses import dataclass

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess, tree_rss
from bench.broker import create_topics, delete_topics, kafka, topic_size
from bench.load import PacedProducer
from bench.stats import run_directory, slope, write_result

MB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    seconds: float
    rss: int


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--rate", type=float, default=10_000, help="input records per second")
    parser.add_argument("--slowdown", type=float, default=10, help="the processor runs at rate / slowdown")
    parser.add_argument("--seconds", type=float, default=60, help="how long to sample")
    parser.add_argument("--warmup", type=float, default=15, help="seconds of samples the summary ignores")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--pause-at", type=int, default=None, help="the app's queue.pause_at")
    parser.add_argument("--resume-at", type=int, default=None, help="the app's queue.resume_at")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


async def sample(process: RuntimeProcess, producer: PacedProducer, args: argparse.Namespace) -> list[Sample]:
    samples: list[Sample] = []
    produce = asyncio.create_task(producer.run())
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < args.seconds:
            if not process.running():
                raise RuntimeError(f"the runtime exited early; log {process.log_path}:\n{process.log_tail()}")
            samples.append(Sample(elapsed, tree_rss(process.pid)))
            if len(samples) % max(1, round(5 / args.interval)) == 0:
                print(f"  {elapsed:5.1f} s  RSS {samples[-1].rss / MB:7.1f} MB  produced {producer.sent:,}")
            await asyncio.sleep(args.interval)
    finally:
        producer.stop.set()
        await produce
    return samples


def queue_settings(args: argparse.Namespace) -> dict[str, object]:
    queue = {"pause_at": args.pause_at, "resume_at": args.resume_at}
    chosen = {key: value for key, value in queue.items() if value is not None}
    return {"queue": chosen} if chosen else {}


def main() -> None:
    args = parse_args()
    workdir = run_directory("memory")
    suffix = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"bench-mem-in-{suffix}", f"bench-mem-out-{suffix}"
    per_task = args.rate / args.slowdown / args.partitions
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions, output_topic: args.partitions}))
        spec = AppSpec(
            app_id=f"bench-memory-{suffix}",
            bootstrap=bootstrap,
            input_topic=input_topic,
            output_topic=output_topic,
            partitions=args.partitions,
            processor_class="bench.processors:PacedTransform",
            params={"records_per_second": per_task},
            extra=queue_settings(args),
        )
        print(
            f"input {args.rate:,.0f} rec/s, processor {per_task * args.partitions:,.0f} rec/s "
            f"({per_task:,.1f} per task x {args.partitions}), sampling RSS for {args.seconds:.0f} s"
        )
        process = RuntimeProcess(spec.write(workdir))
        producer = PacedProducer(bootstrap, input_topic, args.partitions, args.rate)
        try:
            samples = asyncio.run(sample(process, producer, args))
        finally:
            code = process.terminate()
        if code != 0:
            print(f"note: the runtime exited with {code} after SIGTERM; log {process.log_path}:\n{process.log_tail()}")
        processed = asyncio.run(topic_size(bootstrap, output_topic))
        asyncio.run(delete_topics(bootstrap, [input_topic, output_topic]))
    steady = [s for s in samples if s.seconds >= args.warmup] or samples
    rss = [s.rss / MB for s in steady]
    growth = slope([s.seconds for s in steady], rss) * 60
    summary = {
        "produced": producer.sent,
        "processed": processed,
        "peak_rss_mb": max(s.rss for s in samples) / MB,
        "steady_min_mb": min(rss),
        "steady_max_mb": max(rss),
        "steady_slope_mb_per_min": growth,
    }
    print(
        f"produced {producer.sent:,}, processed {processed:,} "
        f"({processed / max(1, producer.sent):.0%}; backlog {producer.sent - processed:,} left in Kafka)"
    )
    print(
        f"RSS after {args.warmup:.0f} s warm-up: min {min(rss):.1f} MB, max {max(rss):.1f} MB, "
        f"spread {max(rss) - min(rss):.1f} MB, slope {growth:+.2f} MB/min; peak {summary['peak_rss_mb']:.1f} MB"
    )
    path = write_result(
        workdir,
        "memory",
        {
            "rate": args.rate,
            "slowdown": args.slowdown,
            "seconds": args.seconds,
            "warmup": args.warmup,
            "partitions": args.partitions,
            "queue": queue_settings(args).get("queue", "runtime defaults"),
            "summary": summary,
            "samples": [[round(s.seconds, 2), s.rss] for s in samples],
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
