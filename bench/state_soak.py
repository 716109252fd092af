"""State larger than memory: a RocksDB store of `--keys` keys under a `rocksdb.memory_mb` well below its size,
processed for `--minutes` or more, with its rate and RSS every 30 s; RSS must not grow.

`python -m bench.state_soak [--keys 10000000] [--passes 5] [--partitions 6] [--memory-mb 64] [--bootstrap HOST:PORT]`

The input holds every key `--passes` times over, in order (record i has key i mod keys): the first pass
builds the store, the next ones update every key of it, one after the other, so that the block cache
(a few megabytes against a store of hundreds) is of no help and nearly every read goes to disk. One
worker (`CountPerKey`, its store with a changelog) processes the whole input with `--until-caught-up`;
the benchmark samples the process's RSS and reads its counters from its Prometheus endpoint. The RSS
trend is the slope over the last two thirds of the run (after the store is built), in MB per minute.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.app import RuntimeProcess, disk_usage, tree_rss
from bench.broker import create_topics, kafka
from bench.data import fill_topic
from bench.guarantees import spec
from bench.stats import run_directory, slope, write_result
from runtime.devkafka.broker import free_port

MB = 1024 * 1024
SAMPLE_S = 30.0


@dataclass(frozen=True)
class Sample:
    seconds: float
    rss_mb: float
    processed: float
    rocksdb_mb: float


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.state_soak", description=__doc__)
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--passes", type=int, default=5, help="times each key is in the input")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--memory-mb", type=int, default=64)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def scrape(port: int) -> dict[str, float]:
    """The worker's metrics, summed over their series by sample name."""
    totals: dict[str, float] = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for family in text_string_to_metric_families(response.read().decode()):
            for sample in family.samples:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def sample(process: RuntimeProcess, port: int, started: float, samples: list[Sample], done: threading.Event) -> None:
    while not done.wait(SAMPLE_S):
        try:
            metrics = scrape(port)
        except OSError:
            continue  # not serving yet, or no more
        samples.append(Sample(time.monotonic() - started, tree_rss(process.pid) / MB,
                              metrics.get("kafka_actor_records_processed_total", 0.0),
                              metrics.get("kafka_actor_rocksdb_memory_used_bytes", 0.0) / MB))  # fmt: skip
        print(f"{samples[-1].seconds:6.0f} s: RSS {samples[-1].rss_mb:6.1f} MB, RocksDB {samples[-1].rocksdb_mb:5.1f} "
              f"MB, {samples[-1].processed:12,.0f} processed", flush=True)  # fmt: skip


def main() -> None:
    args = parse_args()
    directory = run_directory("state-soak")
    records = args.keys * args.passes
    with kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-soak-") as state:
        topic = f"bench-soak-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topics(bootstrap, {topic: args.partitions}))
        print(f"filling {topic} with {records:,} records over {args.keys:,} keys ...", flush=True)
        asyncio.run(fill_topic(bootstrap, topic, records, args.partitions, keys=args.keys))
        app = spec(bootstrap, topic, args.partitions, "at_least_once", True, Path(state), label="soak-")
        port = free_port()
        telemetry = {"metrics": {"exporter": "prometheus", "host": "127.0.0.1", "port": port}}
        app = replace(app, extra={**app.extra, "telemetry": telemetry, "rocksdb": {"memory_mb": args.memory_mb}})
        process = RuntimeProcess(app.write(directory), "--until-caught-up")
        samples: list[Sample] = []
        done = threading.Event()
        sampler = threading.Thread(target=sample, args=(process, port, time.monotonic(), samples, done))
        sampler.start()
        code = process.wait(timeout=records / 5_000)
        done.set()
        sampler.join()
        if code != 0:
            raise RuntimeError(f"the runtime exited with {code}: {process.log_tail()}")
        state_mb = disk_usage(Path(state)).allocated_bytes / MB
    later = samples[len(samples) // 3 :]
    trend = slope([s.seconds / 60 for s in later], [s.rss_mb for s in later]) if len(later) > 1 else 0.0
    rates = [(b.processed - a.processed) / (b.seconds - a.seconds) for a, b in itertools.pairwise(samples)]
    minutes = process.wall_seconds / 60
    print(f"{records:,} records over {args.keys:,} keys in {minutes:.1f} min ({records / process.wall_seconds:,.0f} "
          f"rec/s overall; per 30 s from {min(rates):,.0f} to {max(rates):,.0f}); state on disk {state_mb:,.0f} MB "
          f"against a budget of {args.memory_mb} MB; RSS peak {max(s.rss_mb for s in samples):.0f} MB, last "
          f"{samples[-1].rss_mb:.0f} MB, trend after the first third {trend:+.2f} MB/min")  # fmt: skip
    write_result(directory, "state_soak", {
        "args": vars(args), "records": records, "wall_seconds": process.wall_seconds, "state_mb": state_mb,
        "rss_trend_mb_per_minute": trend, "samples": [asdict(s) for s in samples],
    })  # fmt: skip


if __name__ == "__main__":
    main()
