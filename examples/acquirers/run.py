"""The end-to-end demo: `python -m examples.acquirers.run`.

Starts (or reuses) a local Kafka broker, fills the table terminal_acquirer and produces payments,
runs the router until it has caught up, and checks that every payment of this run came out on its
acquirer's topic (or on the unrouted one: unknown or deactivated terminal, acquirer without a
route). Then it moves some terminals to another acquirer, deactivates others, produces more
payments and runs the router again: the payments must follow the changed table, and the kept
RocksDB store must have read only the changed rows. Topics and state outlive a run in the dev
broker, so only this run counts: payment ids are new each run, output end offsets taken before.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from examples.acquirers.generate import (
    Payment,
    Terminal,
    change_terminals,
    make_payments,
    make_terminals,
    produce,
    table,
)
from examples.broker import kafka
from examples.payments.run import check, end_offsets, ensure_topics, read_ids
from runtime.config import AppConfig, load_app

ROOT = Path(__file__).resolve().parents[2]
APP_YAML = Path("examples/acquirers/app.yaml")  # relative to ROOT, as a user would type it
READY = re.compile(r"global stores \[.*\] ready: (\d+) records read in ([0-9.]+)s")


@dataclass(frozen=True)
class Router:
    """What the demo needs to know of the app: its topics and routes, as the YAML names them."""

    table_topic: str
    persistent: bool  # a RocksDB store: a restart reads only new rows
    payments_topic: str
    routes: dict[str, str]  # acquirer id -> topic
    unrouted: str

    @classmethod
    def of(cls, config: AppConfig) -> Router:
        route = config.processors[0]
        store = config.global_stores[route.params["store"]]
        routes = dict(route.params["routes"])
        return cls(store.topic, store.backend == "rocksdb", route.inputs[0], routes, route.params["unrouted"])

    @property
    def outputs(self) -> list[str]:
        return sorted({*self.routes.values(), self.unrouted})

    def expected(self, payments: Iterable[Payment], acquirers: Mapping[str, str | None]) -> dict[str, str]:
        """Payment id -> the topic it must land on, given the table as this run wrote it."""
        no_route = self.unrouted  # unknown terminal, deactivated terminal, or an acquirer without a route
        return {p.payment_id: self.routes.get(acquirers.get(p.terminal_id) or "", no_route) for p in payments}


@dataclass(frozen=True)
class Phase:
    """One run of the router: what it read of the table, and this run's payments found per output topic."""

    table_records_read: int
    routed: dict[str, int]
    problems: list[str]


def payment_key(key: bytes | None, value: bytes) -> str:
    return key.decode() if key is not None else ""  # the router keeps the payment id as the key


def run_app(app_yaml: Path, bootstrap: str, timeout_s: float) -> tuple[int, str]:
    """Run the app as a user would, until it has caught up; its exit code and log."""
    command = [sys.executable, "-m", "runtime", str(app_yaml), "--until-caught-up"]
    print(f"  running: {' '.join(['python', *command[1:]])}", flush=True)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, timeout=timeout_s, capture_output=True, text=True, check=False
        )
    except subprocess.TimeoutExpired:
        print(f"error: the app did not catch up within {timeout_s:.0f} s", file=sys.stderr)
        return 1, ""
    return done.returncode, done.stdout + done.stderr


def route_once(
    app_yaml: Path, bootstrap: str, router: Router, partitions: Mapping[str, int], payments: list[Payment],
    acquirers: Mapping[str, str | None], timeout_s: float,
) -> Phase:  # fmt: skip
    """Produce `payments`, run the app, and check where each of them landed."""
    before = asyncio.run(end_offsets(bootstrap, {topic: partitions[topic] for topic in router.outputs}))
    asyncio.run(produce(bootstrap, router.payments_topic, ((p.key, p.value) for p in payments)))
    started = time.perf_counter()
    code, log = run_app(app_yaml, bootstrap, timeout_s)
    if code != 0:
        print(log[-3000:], file=sys.stderr)
        return Phase(0, {}, [f"the app exited with code {code}"])
    ready = READY.search(log)
    read = int(ready.group(1)) if ready else 0
    if ready:
        print(f"  {ready.group(0)}; caught up and exited after {time.perf_counter() - started:.1f} s")
    expected = router.expected(payments, acquirers)
    found = {topic: (topic, asyncio.run(read_ids(bootstrap, before, topic, payment_key))) for topic in router.outputs}
    routed = {topic: sum(n for key, n in ids.items() if key in expected) for topic, (_, ids) in found.items()}
    for topic, count in routed.items():
        print(f"  {topic:<28}{count:>9,}")
    return Phase(read, routed, check(expected, found))


def demo(app_yaml: Path, bootstrap: str, terminals: int, payments: int, seed: int, timeout_s: float) -> list[Phase]:
    """Both runs of the router; each phase lists what went wrong (nothing, when all is well)."""
    config = load_app(ROOT / app_yaml)
    router = Router.of(config)
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    rng = random.Random(seed)
    rows = make_terminals(terminals, rng)
    asyncio.run(produce(bootstrap, router.table_topic, (t.row() for t in rows)))
    first = make_payments(payments, rows, 0.02, rng)
    print(f"phase 1: {terminals:,} terminals into '{router.table_topic}', {payments:,} payments (seed {seed})")
    phases = [route_once(app_yaml, bootstrap, router, partitions, first, table(rows), timeout_s)]
    if phases[0].problems:
        return phases  # the table changes would only add to them

    changes = change_terminals(rows, 0.1, rng)
    asyncio.run(produce(bootstrap, router.table_topic, (t.row() for t in changes)))
    second = make_payments(payments, rows, 0.02, rng)
    print(f"phase 2: {moved(changes):,} terminals moved to another acquirer, "
          f"{len(changes) - moved(changes):,} deactivated, {payments:,} more payments")  # fmt: skip
    phase = route_once(app_yaml, bootstrap, router, partitions, second, table([*rows, *changes]), timeout_s)
    if router.persistent and phase.table_records_read != len(changes):
        message = f"the kept store read {phase.table_records_read:,} table records, not the {len(changes):,} new ones"
        phase = Phase(phase.table_records_read, phase.routed, [*phase.problems, message])
    phases.append(phase)
    return phases


def moved(changes: list[Terminal]) -> int:
    return sum(1 for terminal in changes if terminal.active)


def verdict(phases: list[Phase]) -> int:
    """Print what went wrong, or that nothing did; the exit code."""
    problems = [problem for phase in phases for problem in phase.problems]
    if problems:
        print("FAILED:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    payments = sum(sum(phase.routed.values()) for phase in phases)
    print(f"OK: each of the {payments:,} payments came out on its acquirer's topic, before and after the table changed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.acquirers.run",
        description="Fill the terminal table, route payments by acquirer, change the table, route again; check both.",
    )
    parser.add_argument("--terminals", type=int, default=10_000, help="terminals in the table (default 10000)")
    parser.add_argument("--payments", type=int, default=20_000, help="payments per phase (default 20000)")
    parser.add_argument("--seed", type=int, help="default: a new one each run (printed, to reproduce it)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds each run of the app may take")
    parser.add_argument("--keep-broker", action="store_true", help="leave a broker started here running")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    # The producers retry on their own while new topics elect their leaders; what they give up on still raises.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)

    with kafka(args.keep_broker) as bootstrap:
        phases = demo(APP_YAML, bootstrap, args.terminals, args.payments, seed, args.timeout)
    return verdict(phases)


if __name__ == "__main__":
    sys.exit(main())
