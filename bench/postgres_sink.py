"""The exactly-once PostgreSQL sink: rows per second from a Kafka topic into a PostgreSQL table, one
process, against a plain per-row INSERT loop measured in the same run.

`python -m bench.postgres_sink [--records 500000] [--keys 100000] [--partitions 6] [--runs 3]
[--modes insert upsert] [--bootstrap HOST:PORT] [--database URL]`

Each run: a fresh table and app id, `python -m runtime app.yaml --until-caught-up` with one
`processors.sinks:PostgresSink` task per partition writing the benchmark data (msgpack values of about
100 bytes) as rows of five columns, at-least-once (the database's exactly-once does not depend on it).
`insert`: every record a row; `upsert`: a row per key (`--keys`), the last record of each key winning.
The rows are counted in the table afterwards. Rates: records over the process's wall clock (start-up
included) and over its processing span. The baseline: the same rows written by one asyncpg connection,
one INSERT per row, in transactions of 5,000 rows, what a hand-written sink does. Starts its own
Kafka broker and PostgreSQL (Debian's package) unless given.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from bench.app import RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic, make_key, make_value
from bench.stats import median, run_directory, write_result
from runtime.devpostgres.server import throwaway

COLUMNS = {"id": "value.id", "account": "key", "amount": "value.amount", "currency": "value.currency",
           "created": "value.ts"}  # fmt: skip
TABLE = "(id bigint, account text, amount double precision, currency text, created bigint)"


@contextmanager
def postgres(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    print("starting a local PostgreSQL ...", flush=True)
    with throwaway() as server:
        yield server.url


async def sql(url: str, statement: str) -> Any:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(statement)
    finally:
        await connection.close()


def run_sink(
    bootstrap: str, url: str, topic: str, partitions: int, mode: str, records: int, workdir: Path
) -> dict[str, Any]:
    table = f"bench_{mode}_{uuid.uuid4().hex[:8]}"
    keyed = " PRIMARY KEY" if mode == "upsert" else ""
    asyncio.run(sql(url, f"CREATE TABLE {table} {TABLE.replace('account text', f'account text{keyed}')}"))
    params: dict[str, Any] = {"dsn": url, "table": table, "columns": COLUMNS, "mode": mode}
    if mode == "upsert":
        params["key_columns"] = ["account"]
    app = {
        "app_id": table, "kafka": {"bootstrap_servers": bootstrap}, "state_dir": str(workdir / "state"),
        "topics": {topic: {"partitions": partitions, "key_serde": "str", "value_serde": "msgpack"}},
        "processors": [{"name": "sink", "class": "processors.sinks:PostgresSink", "inputs": [topic], "params": params}],
    }  # fmt: skip
    path = workdir / f"{table}.yaml"
    path.write_text(yaml.safe_dump(app))
    process = RuntimeProcess(path, "--until-caught-up")
    code = process.wait(max(300.0, records / 2_000))
    if code != 0:
        raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
    rows = asyncio.run(sql(url, f"SELECT count(*) FROM {table}"))
    asyncio.run(sql(url, f"DROP TABLE {table}"))
    span = process.logged_span("assigned ", "caught up")
    return {"wall_rate": records / process.wall_seconds, "processing_rate": records / span if span else None,
            "rows": rows, "cpu_seconds": process.cpu_seconds}  # fmt: skip


async def per_row_loop(url: str, records: int, keys: int) -> float:
    """The baseline: one INSERT per row, 5,000 rows per transaction, through one connection."""
    table = f"bench_loop_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(f"CREATE TABLE {table} {TABLE}")
        rows = [(v["id"], make_key(i, keys), v["amount"], v["currency"], v["ts"])
                for i in range(records) for v in [make_value(i, keys)]]  # fmt: skip
        insert = f"INSERT INTO {table} (id, account, amount, currency, created) VALUES ($1, $2, $3, $4, $5)"
        started = time.perf_counter()
        for start in range(0, records, 5_000):
            async with connection.transaction():
                for row in rows[start : start + 5_000]:
                    await connection.execute(insert, *row)
        elapsed = time.perf_counter() - started
        await connection.execute(f"DROP TABLE {table}")
    finally:
        await connection.close()
    return records / elapsed


def describe(measured: dict[str, Any], modes: list[str]) -> str:
    return "; ".join(
        f"{mode} {measured[mode]['wall_rate']:,.0f} rec/s wall, {measured[mode]['processing_rate'] or 0:,.0f} "
        f"processing, {measured[mode]['rows']:,} rows"
        for mode in modes
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres_sink", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["insert", "upsert"], choices=["insert", "upsert"])
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--database", help="use this PostgreSQL (a URL) instead of starting one")
    args = parser.parse_args(argv)
    workdir = run_directory("postgres_sink")
    result: dict[str, Any] = {"records": args.records, "keys": args.keys, "partitions": args.partitions, "runs": []}
    with kafka(args.bootstrap) as bootstrap, postgres(args.database) as url:
        topic = f"bench-sink-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topics(bootstrap, {topic: args.partitions}))
        asyncio.run(fill_topic(bootstrap, topic, args.records, args.partitions, args.keys))
        try:
            for run in range(args.runs):
                measured: dict[str, Any] = {"loop_rate": asyncio.run(per_row_loop(url, min(args.records, 100_000),
                                                                                  args.keys))}  # fmt: skip
                for mode in args.modes:
                    measured[mode] = run_sink(bootstrap, url, topic, args.partitions, mode, args.records, workdir)
                result["runs"].append(measured)
                print(
                    f"run {run + 1}: per-row loop {measured['loop_rate']:,.0f} rows/s; "
                    + describe(measured, args.modes)
                )
        finally:
            asyncio.run(delete_topics(bootstrap, [topic]))
    loop = median([run["loop_rate"] for run in result["runs"]])
    result["medians"] = {"loop_rate": loop}
    for mode in args.modes:
        wall = median([run[mode]["wall_rate"] for run in result["runs"]])
        processing = median([run[mode]["processing_rate"] or 0 for run in result["runs"]])
        result["medians"][mode] = {"wall_rate": wall, "processing_rate": processing, "vs_loop": wall / loop}
        print(f"{mode}: {wall:,.0f} rec/s wall ({processing:,.0f} processing), {wall / loop:.1f}x the per-row loop "
              f"({loop:,.0f} rows/s)")  # fmt: skip
    print(f"figures in {write_result(workdir, 'result.json', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
