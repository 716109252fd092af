"""Throughput on three brokers with every topic on 3 replicas (2 in sync) against one broker, in one run: what
replication costs the stateless Transform and the counting app with a RocksDB store and its changelog.

`python -m bench.cluster [--records 200000] [--keys 100000] [--runs 3] [--partitions 6] [--guarantee exactly_once]`

Both start at once, each in a temporary directory (`runtime/devkafka/`), and the runs alternate between
them, so that other load on the machine weighs on both alike. On the cluster the input, the outputs and
the changelog (`internal_topics`) have 3 replicas and `min.insync.replicas` 2: each write is acknowledged
once two brokers hold it. Under exactly-once an output's end offsets count its commit markers too: the
`+N records out` of a run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.app import REPO_ROOT, AppSpec
from bench.broker import create_topics, delete_topics
from bench.data import fill_topic
from bench.stateful import STORE, count_store
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, describe, median_of, run_app
from runtime.devkafka import LocalBroker
from runtime.devkafka.cluster import LocalCluster

APPS = ("stateless", "stateful")


@dataclass(frozen=True)
class Target:
    """Where the apps run: a bootstrap address and the replicas every topic there gets."""

    name: str
    bootstrap: str
    replicas: int

    @property
    def topic_configs(self) -> dict[str, str]:
        return {"min.insync.replicas": "2"} if self.replicas > 1 else {}

    def create(self, topic: str, partitions: int) -> None:
        asyncio.run(create_topics(self.bootstrap, {topic: partitions}, self.replicas, self.topic_configs))

    def internal_topics(self) -> dict[str, Any]:
        return {"replication_factor": self.replicas, "configs": self.topic_configs}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys in the input")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--guarantee", default="exactly_once", choices=["at_least_once", "exactly_once"])
    return parser.parse_args()


@contextmanager
def targets() -> Iterator[list[Target]]:
    """A single broker and a cluster of three, both running until the block ends."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while new topics' leaders settle
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as data:
        single = LocalBroker(data_dir=Path(data) / "single")
        cluster = LocalCluster(Path(data) / "cluster", size=3)
        print("starting a local Kafka broker and a cluster of three ...", flush=True)
        try:
            single.start()
            cluster.start()
            yield [
                Target("1 broker", single.bootstrap_servers, replicas=1),
                Target("3 brokers", cluster.bootstrap_servers, replicas=3),
            ]
        finally:
            single.stop()
            cluster.stop()


def run_one(app: str, target: Target, input_topic: str, args: argparse.Namespace, workdir: Path) -> Measurement:
    """One `--until-caught-up` run of the app over the whole input; its output, state and changelog deleted."""
    output = f"bench-out-{uuid.uuid4().hex[:8]}"
    target.create(output, args.partitions)
    state_dir = workdir / "state"
    extra: dict[str, Any] = {"internal_topics": target.internal_topics(), "state_dir": str(state_dir)}
    spec = AppSpec(
        app_id=f"bench-{app}-{uuid.uuid4().hex[:8]}",
        bootstrap=target.bootstrap,
        input_topic=input_topic,
        output_topic=output,
        partitions=args.partitions,
        processor_class="bench.processors:CountPerKey" if app == "stateful" else "bench.processors:Transform",
        guarantee=args.guarantee,
        extra=extra,
        processor_name="count" if app == "stateful" else "transform",
        stores=count_store("rocksdb") if app == "stateful" else {},
    )
    measured, _ = run_app(spec, workdir, args.records)
    if measured.records_out < args.records:
        raise RuntimeError(f"{spec.app_id} on {target.name} wrote {measured.records_out} of {args.records} records")
    if app == "stateful":
        shutil.rmtree(state_dir / spec.app_id, ignore_errors=True)
        asyncio.run(delete_topics(target.bootstrap, [f"{spec.app_id}-{STORE}-changelog"]))
    return measured


def describe_median(figures: dict[str, float]) -> str:
    return f"{figures['rate']:8,.0f} ({figures['processing_rate']:8,.0f}; {figures['cpu_rate']:8,.0f})"


def main() -> None:
    args = parse_args()
    workdir = run_directory("cluster")
    records = args.records
    runs: dict[str, dict[str, list[Measurement]]] = {}
    with targets() as where:
        inputs = {}
        for target in where:
            runs[target.name] = {app: [] for app in APPS}
            inputs[target.name] = topic = f"bench-in-{uuid.uuid4().hex[:8]}"
            target.create(topic, args.partitions)
            print(f"filling {topic} on {target.name} ({args.partitions} partitions, {target.replicas} replicas) ...")
            rate = asyncio.run(fill_topic(target.bootstrap, topic, records, args.partitions, args.keys))
            print(f"  produced {records:,} records at {rate:,.0f} rec/s")
        for number in range(1, args.runs + 1):
            for app in APPS:
                for target in where:
                    measured = run_one(app, target, inputs[target.name], args, workdir)
                    runs[target.name][app].append(measured)
                    print(f"run {number}/{args.runs} {describe(f'{app:9} {target.name:9}', measured, records)}")
    summary = {
        name: {
            app: {
                "rate": median([m.rate(records) for m in measured]),
                "processing_rate": median_of(m.inner_rate(records) for m in measured),
                "cpu_rate": median_of(m.cpu_rate(records) for m in measured),
            }
            for app, measured in by_app.items()
        }
        for name, by_app in runs.items()
    }
    single, cluster = (summary[target.name] for target in where)
    print(
        f"median of {args.runs}, {args.guarantee}, {records:,} records: rec/s by the wall clock, start-up included "
        "(processing only; per CPU second of the runtime)"
    )
    for app in APPS:
        print(
            f"  {app:9}: 1 broker {describe_median(single[app])}, 3 brokers RF 3 {describe_median(cluster[app])}, "
            f"3 brokers/1 broker {cluster[app]['rate'] / single[app]['rate']:.2f}"
        )
    path = write_result(
        workdir,
        "cluster",
        {
            "records": records,
            "keys": args.keys,
            "partitions": args.partitions,
            "guarantee": args.guarantee,
            "runs": {name: {app: list(map(asdict, ms)) for app, ms in by_app.items()} for name, by_app in runs.items()},
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
