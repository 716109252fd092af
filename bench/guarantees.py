"""Exactly-once against at-least-once, in the same run: stateless and stateful throughput, and the cost of
one transactional producer per task as the number of partitions per worker grows.

    python -m bench.guarantees [--records 1000000] [--keys 100000] [--runs 5] [--sweep 1,6,24,96]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from pathlib import Path

from bench.app import AppSpec
from bench.broker import create_topics, kafka
from bench.data import fill_topic
from bench.stateful import count_store
from bench.stats import median, run_directory, write_result
from bench.throughput import fresh_output, run_app

GUARANTEES = ("at_least_once", "exactly_once")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.guarantees", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--sweep", default="1,6,24,96", help="partition counts for the exactly-once sweep")
    parser.add_argument("--sweep-records", type=int, default=300_000)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def spec(
    bootstrap: str,
    topic: str,
    partitions: int,
    guarantee: str,
    stateful: bool,
    state_dir: Path,
    value_serde: str = "msgpack",
    label: str = "",
) -> AppSpec:
    """The `Transform` or `CountPerKey` app with a fresh app id (`label` in it) and a fresh output topic."""
    kind = "stateful" if stateful else "stateless"
    return AppSpec(
        app_id=f"bench-{label}{kind}-{guarantee}-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=topic,
        output_topic=asyncio.run(fresh_output(bootstrap, partitions)),
        partitions=partitions,
        processor_class="bench.processors:CountPerKey" if stateful else "bench.processors:Transform",
        guarantee=guarantee,
        processor_name="count" if stateful else "transform",
        stores=count_store("rocksdb") if stateful else {},
        extra={"state_dir": str(state_dir)},
        value_serde=value_serde,
    )


def rate(bootstrap: str, app: AppSpec, records: int, workdir: Path) -> float:
    measured, _ = run_app(app, workdir, records)
    if measured.records_out < records:
        raise RuntimeError(f"{app.app_id} wrote {measured.records_out} of {records} records")
    return measured.rate(records)


def main() -> None:
    args = parse_args()
    workdir = run_directory("guarantees")
    runs: list[dict[str, float]] = []
    sweep: dict[int, float] = {}
    with kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as state:
        topic = f"bench-in-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topics(bootstrap, {topic: args.partitions}))
        asyncio.run(fill_topic(bootstrap, topic, args.records, args.partitions, args.keys))
        for run in range(1, args.runs + 1):
            figures: dict[str, float] = {}
            for kind in ("stateless", "stateful"):
                for guarantee in GUARANTEES:
                    app = spec(bootstrap, topic, args.partitions, guarantee, kind == "stateful", Path(state))
                    figures[f"{kind}_{guarantee}"] = rate(bootstrap, app, args.records, workdir)
            for kind in ("stateless", "stateful"):
                figures[f"{kind}_ratio"] = figures[f"{kind}_exactly_once"] / figures[f"{kind}_at_least_once"]
            runs.append(figures)
            print(f"run {run}/{args.runs}: " + ", ".join(f"{name} {value:,.2f}" for name, value in figures.items()))
        medians = {name: median([figures[name] for figures in runs]) for name in runs[0]}
        print("median: " + ", ".join(f"{name} {value:,.2f}" for name, value in medians.items()))
        for partitions in (int(p) for p in args.sweep.split(",")):
            sweep_topic = f"bench-sweep-{partitions}-{uuid.uuid4().hex[:8]}"
            asyncio.run(create_topics(bootstrap, {sweep_topic: partitions}))
            asyncio.run(fill_topic(bootstrap, sweep_topic, args.sweep_records, partitions, args.keys))
            app = spec(bootstrap, sweep_topic, partitions, "exactly_once", False, Path(state))
            sweep[partitions] = rate(bootstrap, app, args.sweep_records, workdir)
            print(f"exactly-once, stateless, {partitions:3} partitions (producers): {sweep[partitions]:,.0f} rec/s")
    path = write_result(workdir, "guarantees", {"runs": runs, "median": medians, "sweep": sweep})
    print(f"result: {path}")


if __name__ == "__main__":
    main()
