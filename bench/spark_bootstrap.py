"""Spark bootstrap: how long `python -m stores.spark bootstrap` takes to turn `--rows` rows of Parquet
into a store snapshot. `python -m bench.spark_bootstrap [--rows 10000000] [--runs 3] [--partitions 6]
[--master local[2]]`

The Parquet file (account id -> opening balance, as the payments example's generator writes it) is
made once by Spark; each run then builds a snapshot from it into a fresh directory and is timed from
the job's start to its manifest: read, encode with the serdes, place by murmur2, sort, write SSTs.
"""

from __future__ import annotations

import argparse
import shutil
import time
from typing import Any

from bench.stats import median, run_directory, write_result
from stores.spark.bootstrap import bootstrap
from stores.spark.session import spark_session


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_bootstrap", description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6, help="the store's partitions")
    parser.add_argument("--master", default="local[2]")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    workdir = run_directory("spark-bootstrap")
    spark = spark_session("bench spark bootstrap", args.master)
    spark.sparkContext.setLogLevel("ERROR")
    source = workdir / "accounts.parquet"
    try:
        started = time.perf_counter()
        spark.range(args.rows).selectExpr(
            "format_string('40817810%012d', id) AS account", "id % 1000000 AS balance_minor"
        ).write.parquet(str(source))
        print(f"wrote {args.rows:,} rows of Parquet in {time.perf_counter() - started:.1f} s")
        seconds: list[float] = []
        for run in range(1, args.runs + 1):
            out = workdir / f"snapshot-{run}"
            started = time.perf_counter()
            built = bootstrap(
                spark,
                spark.read.parquet(str(source)),
                key_columns=["account"],
                value_columns=["balance_minor"],
                app="bench",
                store="balances",
                partitions=args.partitions,
                key_serde="str",
                value_serde="msgpack",
                out=out,
            )
            elapsed = time.perf_counter() - started
            seconds.append(elapsed)
            print(f"run {run}/{args.runs}: {built.rows_written:,} rows in {elapsed:.1f} s = "
                  f"{built.rows_written / elapsed:,.0f} rows/s")  # fmt: skip
            shutil.rmtree(out)
    finally:
        spark.stop()
        shutil.rmtree(source, ignore_errors=True)
    typical = median(seconds)
    print(f"median of {args.runs}: {typical:.1f} s = {args.rows / typical:,.0f} rows/s ({args.master})")
    figures: dict[str, Any] = {"rows": args.rows, "master": args.master, "seconds": seconds, "median_s": typical}
    print(f"result: {write_result(workdir, 'spark_bootstrap', figures)}")


if __name__ == "__main__":
    main()
