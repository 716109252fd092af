"""The transactional outbox: rows per second shipped from a PostgreSQL table to Kafka, and the latency
from a row's database commit to its record being visible in Kafka.

`python -m bench.outbox [--rows 300000] [--runs 3] [--rate 2000] [--seconds 15] [--bootstrap HOST:PORT]
[--database URL]`

Throughput: `--rows` rows (a text key over 1,000 aggregates, a JSON payload of about 100 bytes, a JSON
header) are in the table before the app starts, `python -m runtime app.yaml` ships them with one poller
(batches of 5,000), and a read_committed consumer in this process counts them: the rate is rows over
the span from the first record seen to the last. Latency: a writer commits one row per transaction at
`--rate` rows/s for `--seconds`, each carrying the time just before its insert (the commit follows
within a millisecond); the consumer takes the time each becomes visible; p50 and p99 with a settle
window of 0 (a window adds itself to every row's latency) and a poll interval of 20 ms. Starts its own
Kafka broker and PostgreSQL unless given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import yaml
from aiokafka import AIOKafkaConsumer

from bench.app import RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.postgres_sink import postgres
from bench.stats import median, percentile, run_directory, write_result

TABLE = ("(id bigserial PRIMARY KEY, aggregate text NOT NULL, payload jsonb NOT NULL, headers jsonb, "
         "created_at timestamptz NOT NULL DEFAULT clock_timestamp())")  # fmt: skip
PAYLOAD = {"order": "o-000000", "status": "PAID", "amount_minor": 125000, "currency": "EUR", "note": "bench"}


def app_yaml(workdir: Path, bootstrap: str, url: str, table: str, topic: str, settle_ms: int) -> Path:
    idle = f"{topic}-idle"
    app = {
        "app_id": table, "kafka": {"bootstrap_servers": bootstrap}, "state_dir": str(workdir / "state"),
        "topics": {topic: {"partitions": 6, "key_serde": "str", "value_serde": "json"},
                   idle: {"partitions": 1, "key_serde": "str", "value_serde": "json"}},
        "outboxes": {"orders": {"dsn": url, "table": table, "topic": topic, "key_column": "aggregate",
                                "value_column": "payload", "headers_column": "headers", "settle_ms": settle_ms,
                                "poll_interval_ms": 20}},
        # An app runs processors too; this one reads a topic nobody writes.
        "processors": [{"name": "idle", "class": "bench.processors:Transform", "inputs": [idle], "outputs": [idle],
                        "params": {"output": idle}}],
    }  # fmt: skip
    path = workdir / f"{table}.yaml"
    path.write_text(yaml.safe_dump(app))
    return path


async def fresh_table(url: str, rows: int) -> str:
    table = f"bench_outbox_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(f"CREATE TABLE {table} {TABLE}")
        if rows:
            records = [(f"order-{n % 1000}", json.dumps({**PAYLOAD, "n": n}), '{"source": "bench"}')
                       for n in range(rows)]  # fmt: skip
            await connection.copy_records_to_table(table, records=records, columns=["aggregate", "payload", "headers"])
    finally:
        await connection.close()
    return table


async def seen(bootstrap: str, topic: str, count: int, timeout_s: float) -> list[tuple[float, dict[str, Any]]]:
    """(the time it became visible, its value) of the first `count` records of `topic`, read_committed."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                                auto_offset_reset="earliest", group_id=None, enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    found: list[tuple[float, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(found) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200, max_records=20_000)).values():
                now = time.time()
                found.extend((now, json.loads(record.value)) for record in records)
    finally:
        await consumer.stop()
    return found


def throughput(bootstrap: str, url: str, rows: int, workdir: Path) -> float:
    table = asyncio.run(fresh_table(url, rows))
    topic = f"bench-outbox-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(bootstrap, {topic: 6}))
    process = RuntimeProcess(app_yaml(workdir, bootstrap, url, table, topic, 0))
    try:
        records = asyncio.run(seen(bootstrap, topic, rows, max(120.0, rows / 2_000)))
    finally:
        process.terminate()
        asyncio.run(delete_topics(bootstrap, [topic]))
    if len(records) < rows:
        raise RuntimeError(f"{len(records)} of {rows} rows reached Kafka; log {process.log_path}")
    return rows / (records[-1][0] - records[0][0])


async def write_at_rate(url: str, table: str, rate: int, seconds: float) -> int:
    connection = await asyncpg.connect(url)
    written = 0
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            if written > elapsed * rate:
                await asyncio.sleep(0.001)
                continue
            await connection.execute(f"INSERT INTO {table} (aggregate, payload) VALUES ($1, $2)",
                                     f"order-{written % 1000}", json.dumps({**PAYLOAD, "t": time.time()}))  # fmt: skip
            written += 1
    finally:
        await connection.close()
    return written


def latency(bootstrap: str, url: str, rate: int, seconds: float, workdir: Path) -> list[float]:
    table = asyncio.run(fresh_table(url, 0))
    topic = f"bench-outbox-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(bootstrap, {topic: 6}))
    process = RuntimeProcess(app_yaml(workdir, bootstrap, url, table, topic, 0))

    async def measure() -> list[float]:
        await asyncio.sleep(5.0)  # the worker starts
        expected = int(rate * seconds)
        reader = asyncio.create_task(seen(bootstrap, topic, expected, seconds + 60))
        await write_at_rate(url, table, rate, seconds)
        return [(visible - value["t"]) * 1000 for visible, value in await reader]

    try:
        return sorted(asyncio.run(measure()))
    finally:
        process.terminate()
        asyncio.run(delete_topics(bootstrap, [topic]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outbox", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=2_000, help="rows per second for the latency")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--bootstrap")
    parser.add_argument("--database")
    args = parser.parse_args(argv)
    workdir = run_directory("outbox")
    result: dict[str, Any] = {"rows": args.rows, "rate": args.rate, "seconds": args.seconds, "runs": []}
    with kafka(args.bootstrap) as bootstrap, postgres(args.database) as url:
        for run in range(args.runs):
            rate = throughput(bootstrap, url, args.rows, workdir)
            delays = latency(bootstrap, url, args.rate, args.seconds, workdir)
            measured = {"rows_per_s": rate, "p50_ms": percentile(delays, 0.5), "p99_ms": percentile(delays, 0.99),
                        "latency_samples": len(delays)}  # fmt: skip
            result["runs"].append(measured)
            print(f"run {run + 1}: {rate:,.0f} rows/s shipped; commit to visible p50 {measured['p50_ms']:.1f} ms, "
                  f"p99 {measured['p99_ms']:.1f} ms ({len(delays):,} rows at {args.rate:,}/s)", flush=True)  # fmt: skip
    result["medians"] = {
        key: median([run[key] for run in result["runs"]]) for key in ("rows_per_s", "p50_ms", "p99_ms")
    }
    medians = result["medians"]
    print(
        f"median: {medians['rows_per_s']:,.0f} rows/s; p50 {medians['p50_ms']:.1f} ms, p99 {medians['p99_ms']:.1f} ms"
    )
    print(f"figures in {write_result(workdir, 'result.json', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
