"""Seed 000 from a real database: `python -m examples.acquirers.from_postgres` (`make example-acquirers-db`).

Starts (or reuses) a local Kafka broker and a local PostgreSQL, writes the table terminal_acquirer in
PostgreSQL, and runs the router of app_postgres.yaml as a user would (`python -m runtime ...`): its table
follower snapshots the table into the compacted topic, and its global store reads the topic. Payments
are produced and each must come out on its acquirer's topic; then some terminals move to another
acquirer and others close, in the database, and the next payments must follow the table as it is then.
The table, the topics and the app's position in the table stay from one run to the next.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import asyncpg

from examples.acquirers.generate import (
    Payment,
    Terminal,
    change_terminals,
    make_payments,
    make_terminals,
    produce,
    table,
)
from examples.acquirers.run import Router, payment_key
from examples.broker import database
from examples.demo_cli import run_plain_demo
from examples.payments.run import ROOT, Offsets, check, end_offsets, ensure_topics, read_ids
from runtime.config import load_app

APP_YAML = Path("examples/acquirers/app_postgres.yaml")  # relative to ROOT, as a user would type it
SCHEMA = ("CREATE TABLE IF NOT EXISTS terminal_acquirer (id bigint, terminal_id text PRIMARY KEY, "
          "acquirer_id text NOT NULL, is_active boolean NOT NULL, update_date timestamptz NOT NULL "
          "DEFAULT clock_timestamp())")  # fmt: skip


async def write_rows(url: str, terminals: list[Terminal]) -> None:
    """Insert or update each terminal's row, as the system that owns the table would; every write sets its version."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(SCHEMA)
        await connection.executemany(
            "INSERT INTO terminal_acquirer (id, terminal_id, acquirer_id, is_active) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (terminal_id) DO UPDATE SET acquirer_id = excluded.acquirer_id, "
            "is_active = excluded.is_active, update_date = clock_timestamp()",
            [(t.row_id, t.terminal_id, t.acquirer_id, t.active) for t in terminals],
        )
    finally:
        await connection.close()


def wait_for(bootstrap: str, topic_ends: Mapping[str, int], start: Offsets, count: int, timeout_s: float) -> int:
    """Until `count` records came to the topics after `start`; how many did."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = sum(asyncio.run(read_ids(bootstrap, start, topic, lambda key, value: repr(key))).total()
                   for topic in topic_ends)  # fmt: skip
        if seen >= count or time.monotonic() > deadline:
            return seen
        time.sleep(0.5)


def phase(
    bootstrap: str, router: Router, partitions: Mapping[str, int], payments: list[Payment],
    acquirers: Mapping[str, str | None], timeout_s: float,
) -> list[str]:  # fmt: skip
    """Produce `payments` to the running router; what is wrong with where they came out."""
    outputs = {topic: partitions[topic] for topic in router.outputs}
    before = asyncio.run(end_offsets(bootstrap, outputs))
    asyncio.run(produce(bootstrap, router.payments_topic, ((p.key, p.value) for p in payments)))
    wait_for(bootstrap, outputs, before, len(payments), timeout_s)
    found = {topic: (topic, asyncio.run(read_ids(bootstrap, before, topic, payment_key))) for topic in router.outputs}
    return check(router.expected(payments, acquirers), found)


def demo(app_yaml: Path, bootstrap: str, terminals: int, payments: int, seed: int, timeout_s: float) -> list[str]:
    config = load_app(ROOT / app_yaml)
    router = Router.of(config)
    with database() as url:
        partitions = asyncio.run(ensure_topics(bootstrap, config))
        rng = random.Random(seed)
        rows = make_terminals(terminals, rng)
        reference = {router.table_topic: partitions[router.table_topic]}
        shipped_before = asyncio.run(end_offsets(bootstrap, reference))
        asyncio.run(write_rows(url, rows))
        print(f"phase 1: {terminals:,} terminals written to PostgreSQL's terminal_acquirer (seed {seed})")
        log = Path(tempfile.mkdtemp(prefix="acquirers-db-")) / "app.log"
        command = [sys.executable, "-m", "runtime", str(app_yaml)]
        print(f"  running: {' '.join(['python', *command[1:]])}", flush=True)
        with log.open("w") as output:
            app = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
                                   stdout=output, stderr=subprocess.STDOUT)  # fmt: skip
            try:
                followed = wait_for(bootstrap, reference, shipped_before, terminals, timeout_s)
                print(f"  the follower put {followed:,} rows into '{router.table_topic}'")
                time.sleep(1.0)  # the global store follows its topic
                problems = phase(bootstrap, router, partitions, make_payments(payments, rows, 0.02, rng),
                                 table(rows), timeout_s)  # fmt: skip
                if not problems:
                    changes = change_terminals(rows, 0.1, rng)
                    shipped_before = asyncio.run(end_offsets(bootstrap, reference))
                    asyncio.run(write_rows(url, changes))
                    print(
                        f"phase 2: {len(changes):,} terminals moved or closed in PostgreSQL, {payments:,} more payments"
                    )
                    wait_for(bootstrap, reference, shipped_before, len(changes), timeout_s)
                    time.sleep(1.0)
                    problems = phase(bootstrap, router, partitions, make_payments(payments, rows, 0.02, rng),
                                     table([*rows, *changes]), timeout_s)  # fmt: skip
            finally:
                app.send_signal(signal.SIGTERM)
                code = app.wait(60)
        if code != 0:
            problems.append(f"the app exited with {code} (log {log})")
        return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.acquirers.from_postgres",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--terminals", type=int, default=2_000, help="terminals in the table (default 2000)")
    parser.add_argument("--payments", type=int, default=5_000, help="payments per phase (default 5000)")
    return run_plain_demo(
        parser,
        argv,
        lambda bootstrap, args, seed: demo(APP_YAML, bootstrap, args.terminals, args.payments, seed, args.timeout),
        "OK: the table followed from PostgreSQL routed every payment to its acquirer, before and after it changed",
    )


if __name__ == "__main__":
    sys.exit(main())
