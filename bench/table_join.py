"""The stream-table join: the built-in `processors.joins:TableJoin` enriching a stream of `--records` JSON
records with a table of `--keys` keys (a compacted topic co-partitioned with it), at-least-once and
exactly-once, one process, each run a fresh app id, output and state; with a plain table and with a
versioned one (`history_ms`, a day), and the ratio of the two.

`python -m bench.table_join [--records 1000000] [--keys 100000] [--partitions 6] [--runs 3]
[--guarantees at_least_once exactly_once] [--tables plain versioned] [--bootstrap HOST:PORT]`

The table's records are older than the stream's, so every stream record finds its key (a left join that
always joins); the table is read into the task's store first, in timestamp order, as part of the run.
Figures per run: stream records per second over the process's wall clock (start-up and the table
included) and over its processing span, per CPU second, and the joined records counted on the output.
A versioned table writes each table record as a version and each stream record reads the version valid
at its time: here the latest, one point lookup, as for a plain table.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from bench.app import REPO_ROOT, RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, finish_output, median_of, timeout_for

TABLES = {"plain": None, "versioned": 86_400_000}
"""The table's `history_ms` of each variant."""


def first_ms() -> int:
    """The table's records from an hour ago on, a millisecond apart, the stream's after them: recent enough
    that the broker's retention (7 days) keeps them."""
    return time.time_ns() // 1_000_000 - 3_600_000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.table_join", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000, help="stream records")
    parser.add_argument("--keys", type=int, default=100_000, help="table keys (the stream's keys too)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--guarantees", nargs="+", default=["at_least_once", "exactly_once"],
                        choices=["at_least_once", "exactly_once"])  # fmt: skip
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def app_yaml(
    bootstrap: str, stream: str, table: str, partitions: int, guarantee: str, state_dir: Path, history_ms: int | None
) -> dict[str, Any]:
    app_id = f"bench-table-join-{guarantee}-{uuid.uuid4().hex[:8]}"
    table_spec: dict[str, Any] = {"topic": table} if history_ms is None else {"topic": table, "history_ms": history_ms}
    json_topic = {"partitions": partitions, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {stream: json_topic, table: {**json_topic, "cleanup_policy": "compact"},
                   f"{app_id}-enriched": json_topic},
        "processors": [{
            "name": "enrich",
            "class": "processors.joins:TableJoin",
            "inputs": [stream],
            "tables": {"customers": table_spec},
            "outputs": [f"{app_id}-enriched"],
            "params": {"table": "customers", "output": f"{app_id}-enriched", "join": "left"},
        }],
        "guarantee": guarantee,
        "state_dir": str(state_dir),
    }  # fmt: skip


def run_once(app: dict[str, Any], bootstrap: str, records: int, workdir: Path) -> Measurement:
    path = workdir / f"{app['app_id']}.yaml"
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    process = RuntimeProcess(path, "--until-caught-up")
    code = process.wait(timeout_for(records))
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    joined = asyncio.run(finish_output(bootstrap, f"{app['app_id']}-enriched"))
    shutil.rmtree(Path(app["state_dir"]) / app["app_id"], ignore_errors=True)
    return Measurement(process.wall_seconds, joined, process.logged_span("assigned ", "caught up"), None,
                       process.cpu_seconds)  # fmt: skip


def main() -> None:
    args = parse_args()
    workdir = run_directory("table-join")
    variants = [f"{guarantee} {kind}" for guarantee in args.guarantees for kind in args.tables]
    runs: dict[str, list[Measurement]] = {variant: [] for variant in variants}
    with kafka(args.bootstrap) as bootstrap:
        suffix = uuid.uuid4().hex[:8]
        stream, table = f"bench-orders-{suffix}", f"bench-customers-{suffix}"
        asyncio.run(create_topics(bootstrap, {stream: args.partitions, table: args.partitions}))
        print(f"filling {table} with {args.keys:,} table records and {stream} with {args.records:,} records")
        first = first_ms()
        asyncio.run(fill_topic(bootstrap, table, args.keys, args.partitions, args.keys, "json",
                               timestamp=lambda i: first + i))  # fmt: skip
        asyncio.run(fill_topic(bootstrap, stream, args.records, args.partitions, args.keys, "json",
                               timestamp=lambda i: first + args.keys + i))  # fmt: skip
        for number in range(1, args.runs + 1):
            for variant in variants:
                guarantee, kind = variant.split()
                app = app_yaml(bootstrap, stream, table, args.partitions, guarantee, workdir / "state", TABLES[kind])
                measured = run_once(app, bootstrap, args.records, workdir)
                runs[variant].append(measured)
                processing = measured.inner_rate(args.records) or 0
                print(f"run {number}/{args.runs} {variant:<24}{measured.wall_seconds:6.2f} s = "
                      f"{measured.rate(args.records):8,.0f} rec/s (processing {processing:,.0f}), "
                      f"cpu {measured.cpu_seconds or 0:.2f} s, {measured.records_out:,} outputs")  # fmt: skip
        asyncio.run(delete_topics(bootstrap, [stream, table]))
    medians = {}
    print(
        f"median of {args.runs} run(s), stream records/s: wall clock of the process | processing span | per CPU second"
    )
    for variant, done in runs.items():
        figures = {
            "rate": median([m.rate(args.records) for m in done]),
            "processing_rate": median_of(m.inner_rate(args.records) for m in done),
            "cpu_rate": median_of(m.cpu_rate(args.records) for m in done),
        }
        medians[variant] = figures
        print(f"  {variant:<24}{figures['rate']:>9,.0f} | {figures['processing_rate']:>9,.0f} | "
              f"{figures['cpu_rate']:>9,.0f}")  # fmt: skip
    for guarantee in args.guarantees:
        plain, versioned = medians.get(f"{guarantee} plain"), medians.get(f"{guarantee} versioned")
        if plain is not None and versioned is not None:
            print(f"  versioned / plain, {guarantee}: " + " | ".join(
                f"{versioned[figure] / plain[figure]:.2f}" if plain[figure] else "-"
                for figure in ("rate", "processing_rate", "cpu_rate")))  # fmt: skip
    every_run = {variant: [asdict(m) for m in done] for variant, done in runs.items()}
    path = write_result(workdir, "table_join", {"arguments": vars(args), "median": medians, "runs": every_run})
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
