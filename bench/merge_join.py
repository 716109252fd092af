"""Seed 001's merge join: the built-in `processors.joins:MergeJoin` joining CDC rows (a data topic of
`--partitions` partitions) with their transactions (a broadcast topic of one partition), at-least-once and
exactly-once, one process, against the seed's own figures (24,000 and 19,000 messages/s on the JVM).

`python -m bench.merge_join [--transactions 40000] [--partitions 6] [--runs 3] [--slow-every 0]
[--guarantees at_least_once exactly_once] [--bootstrap HOST:PORT]`

The input is filled once by the example's generator (examples/cdc_merge/changes.py: 1 to 50 rows a
transaction, about 400 bytes a row), then each run starts one fresh app (app id, output topic, state) per
guarantee with `--until-caught-up`. Figures per run: rows per second over the process's wall clock
(start-up included) and over its processing span, rows per CPU second, the peak RSS, and the joined rows
counted on the output. `--slow-every N` makes the join sleep 1 ms every N rows, a processor far slower
than its input, to show that the bounded queues keep the memory flat (peak RSS against the fast run).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from bench.app import REPO_ROOT, RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, finish_output, median_of, timeout_for
from examples.cdc_merge.changes import produce, transactions

SEED_FIGURES = {"at_least_once": 24_000, "exactly_once": 19_000}  # messages/s, seed 001, Kafka Connect on the JVM


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.merge_join", description=__doc__)
    parser.add_argument("--transactions", type=int, default=40_000, help="about 25 rows each (default 40000)")
    parser.add_argument("--partitions", type=int, default=6, help="of the data topic")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slow-every", type=int, default=0, help="sleep 1 ms every N rows (0: never)")
    parser.add_argument("--guarantees", nargs="+", default=list(SEED_FIGURES), choices=list(SEED_FIGURES))
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def app_yaml(bootstrap: str, data: str, transactions_topic: str, partitions: int, guarantee: str, state_dir: Path,
             slow_every: int) -> dict[str, Any]:  # fmt: skip
    app_id = f"bench-merge-{guarantee}-{uuid.uuid4().hex[:8]}"
    json_topic = {"key_serde": "str", "value_serde": "json"}
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {
            data: {"partitions": partitions, **json_topic},
            transactions_topic: {"partitions": 1, **json_topic},
            f"{app_id}-joined": {"partitions": partitions, **json_topic},
        },
        "processors": [{
            "name": "merge",
            "class": "bench.join_processors:SlowMergeJoin" if slow_every else "processors.joins:MergeJoin",
            "inputs": [data],
            "broadcast": [transactions_topic],
            "outputs": [f"{app_id}-joined"],
            "params": {"data": data, "transactions": transactions_topic, "data_id": "tx", "transaction_id": "id",
                       "output": f"{app_id}-joined", **({"slow_every": slow_every} if slow_every else {})},
        }],
        "guarantee": guarantee,
        "state_dir": str(state_dir),
    }  # fmt: skip


def run_once(app: dict[str, Any], bootstrap: str, rows: int, workdir: Path) -> tuple[Measurement, int]:
    """One process until caught up: its measurement and peak RSS; its output, changelog and state deleted."""
    path = workdir / f"{app['app_id']}.yaml"
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    process = RuntimeProcess(path, "--until-caught-up")
    code = process.wait_sampling_rss(timeout_for(rows))
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    output = f"{app['app_id']}-joined"
    joined = asyncio.run(finish_output(bootstrap, output))
    asyncio.run(delete_topics(bootstrap, [f"{app['app_id']}-merge-broadcast-positions-changelog"]))
    shutil.rmtree(Path(app["state_dir"]) / app["app_id"], ignore_errors=True)
    span = process.logged_span("assigned ", "caught up")
    return Measurement(process.wall_seconds, joined, span, None, process.cpu_seconds), process.peak_rss


def main() -> None:
    args = parse_args()
    workdir = run_directory("merge-join")
    runs: dict[str, list[dict[str, Any]]] = {guarantee: [] for guarantee in args.guarantees}
    with kafka(args.bootstrap) as bootstrap:
        suffix = uuid.uuid4().hex[:8]
        data, transactions_topic = f"bench-cdc-data-{suffix}", f"bench-cdc-transactions-{suffix}"
        asyncio.run(create_topics(bootstrap, {data: args.partitions, transactions_topic: 1}))
        changes = list(transactions(args.transactions, seed=1))
        rows = sum(len(t.rows) for t in changes)
        print(f"filling {data} ({args.partitions} partitions) and {transactions_topic} (1): "
              f"{args.transactions:,} transactions, {rows:,} rows")  # fmt: skip
        asyncio.run(produce(bootstrap, data, transactions_topic, changes))
        del changes
        for number in range(1, args.runs + 1):
            for guarantee in args.guarantees:
                app = app_yaml(bootstrap, data, transactions_topic, args.partitions, guarantee, workdir / "state",
                               args.slow_every)  # fmt: skip
                measured, peak_rss = run_once(app, bootstrap, rows, workdir)
                runs[guarantee].append({**asdict(measured), "peak_rss": peak_rss})
                processing = measured.inner_rate(rows)
                print(f"run {number}/{args.runs} {guarantee:<14}{measured.wall_seconds:6.2f} s = "
                      f"{measured.rate(rows):8,.0f} rows/s (processing {processing or 0:,.0f}), "
                      f"cpu {measured.cpu_seconds or 0:.2f} s, peak RSS {peak_rss / 2**20:.0f} MB, "
                      f"{measured.records_out:,} outputs")  # fmt: skip
        asyncio.run(delete_topics(bootstrap, [data, transactions_topic]))
    medians = {}
    print(f"median of {args.runs} run(s), rows/s: wall clock of the process | processing span | per CPU second; "
          "ratio to seed 001's figure (wall clock)")  # fmt: skip
    for guarantee, done in runs.items():
        each = [Measurement(r["wall_seconds"], r["records_out"], r["inner_seconds"], None, r["cpu_seconds"])
                for r in done]  # fmt: skip
        figures = {
            "rate": median([m.rate(rows) for m in each]),
            "processing_rate": median_of(m.inner_rate(rows) for m in each),
            "cpu_rate": median_of(m.cpu_rate(rows) for m in each),
            "peak_rss_mb": median([r["peak_rss"] / 2**20 for r in done]),
        }
        figures["seed_ratio"] = figures["rate"] / SEED_FIGURES[guarantee]
        medians[guarantee] = figures
        print(f"  {guarantee:<14}{figures['rate']:>9,.0f} | {figures['processing_rate']:>9,.0f} | "
              f"{figures['cpu_rate']:>9,.0f}   peak RSS {figures['peak_rss_mb']:.0f} MB   "
              f"x{figures['seed_ratio']:.2f} of {SEED_FIGURES[guarantee]:,}")  # fmt: skip
    path = write_result(workdir, "merge_join", {"arguments": vars(args), "rows": rows, "runs": runs,
                                                "median": medians, "seed_figures": SEED_FIGURES})  # fmt: skip
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
