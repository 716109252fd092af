"""Seed 002's outbox and exactly-once sink, end to end: `python -m examples.orders.run` (`make example-orders`).

Starts (or reuses) a local Kafka broker and a local PostgreSQL, runs the app as a user would (`python -m
runtime examples/orders/app.yaml`), and meanwhile places orders from four connections at once, each
order and its outbox row in one database transaction. The app ships the outbox to Kafka, adds up each
customer's orders and writes the totals back to PostgreSQL; the demo then checks the `customer_totals`
table against the orders table itself (`GROUP BY customer`): every order counted once.

The tables, the topics and the app's state stay from one run to the next: each run adds its orders.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from examples.broker import database
from examples.demo_cli import run_plain_demo
from examples.orders.service import create_tables, expected_totals, place_orders, written_totals
from examples.payments.run import ROOT

APP_YAML = Path("examples/orders/app.yaml")  # relative to ROOT, as a user would type it


def demo(app_yaml: Path, bootstrap: str, orders: int, customers: int, seed: int, timeout_s: float) -> list[str]:
    """One run: orders placed while the app runs, the totals it wrote checked; what went wrong (nothing, when
    all is well)."""
    with database() as url:
        asyncio.run(create_tables(url))
        command = [sys.executable, "-m", "runtime", str(app_yaml)]
        print(f"  running: {' '.join(['python', *command[1:]])}", flush=True)
        log = Path(tempfile.mkdtemp(prefix="orders-example-")) / "app.log"
        with log.open("w") as output:
            app = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
                                   stdout=output, stderr=subprocess.STDOUT)  # fmt: skip
            try:
                print(f"placing {orders:,} orders of {customers:,} customers (seed {seed}), each with its outbox row")
                asyncio.run(place_orders(url, orders, customers, seed))
                expected = asyncio.run(expected_totals(url))
                deadline = time.monotonic() + timeout_s
                while (written := asyncio.run(written_totals(url))) != expected:
                    if app.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
            finally:
                app.send_signal(signal.SIGTERM)
                code = app.wait(60)
        print(f"  customers' totals in PostgreSQL: {len(written):,} of {len(expected):,}")
        if written == expected:
            return [] if code == 0 else [f"the app exited with {code} (log {log})"]
        wrong = sorted(customer for customer in expected if written.get(customer) != expected[customer])
        return [f"{len(wrong):,} customers' totals differ from their orders, e.g. {wrong[0]}: "
                f"{written.get(wrong[0])} for {expected[wrong[0]]} (log {log})"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.orders.run", description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=5_000, help="orders to place (default 5000)")
    parser.add_argument("--customers", type=int, default=200, help="customers (default 200)")
    return run_plain_demo(
        parser,
        argv,
        lambda bootstrap, args, seed: demo(APP_YAML, bootstrap, args.orders, args.customers, seed, args.timeout),
        "OK: every order reached Kafka through the outbox once, and each customer's totals in PostgreSQL count it once",
    )


if __name__ == "__main__":
    sys.exit(main())
