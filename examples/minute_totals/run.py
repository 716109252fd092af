"""The per-minute totals demo: `python -m examples.minute_totals.run` (`make example-minutes`).

Starts (or reuses) a local Kafka broker and produces payments keyed by account (the payments example's
generator), a share of them out of order and a few so late that their minute has closed. Runs the app
as a user would, `python -m runtime examples/minute_totals/app.yaml --until-caught-up`, then reads its
outputs back and checks them against the totals computed here from the same payments (expected.py):
each minute that closed sent once, with its total, and no other; each late payment on the late topic,
and counted by the app. The minutes the last payments left open are reported, not checked: the app
sends them once later payments come.

The broker keeps the topics, and the app its windows, from one run to the next: each run's payments
are made after those of earlier runs (examples/timeline.py), and only this run's minutes and late
payments are checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgpack

from examples.acquirers.run import run_app
from examples.demo_cli import clock, late_counted, run_demo
from examples.disorder import Disorder, add_disorder_options
from examples.minute_totals.expected import Minute, MinuteTotals, expected_totals
from examples.payments.generate import Payment, make_payments, produce_payments
from examples.payments.run import ROOT, end_offsets, ensure_topics, money, read_ids
from examples.timeline import a_day_ago, reaches_past_the_clock, start_after, start_over
from examples.window_results import check_windows, read_windows
from runtime.config import AppConfig, load_app

APP_YAML = Path("examples/minute_totals/app.yaml")  # relative to ROOT, as a user would type it


@dataclass(frozen=True)
class MinuteApp:
    """What the demo needs to know of the app: its topics and window, as the YAML names them."""

    input: str
    output: str
    late_topic: str
    size_ms: int
    grace_ms: int

    @classmethod
    def of(cls, config: AppConfig) -> MinuteApp:
        processor = config.processors[0]
        params, window = processor.params, processor.params["window"]
        return cls(processor.inputs[0], params["output"], params["late_topic"], window["size_ms"], window["grace_ms"])


def created_at(value: bytes) -> int:
    created: int = msgpack.unpackb(value)["created_at"]
    return created


def account_and_currency(key: bytes) -> tuple[str, str]:
    account, currency = json.loads(key)
    return account, currency


def late_payment_id(key: bytes | None, value: bytes) -> str:
    return str(msgpack.unpackb(value)["payment_id"])  # late payments go on as they came


def check_late(expected: set[str], routed: Counter[str], ids: set[str], counted: int) -> list[str]:
    """What is wrong with the late payments: `routed` are the ids on the late topic, `ids` those of this
    run's payments, `counted` the app's count of late records."""
    ours = Counter({payment_id: n for payment_id, n in routed.items() if payment_id in ids})
    problems = []
    if missing := sorted(expected - set(ours)):
        problems.append(f"{len(missing):,} late payments missing from the late topic, e.g. {missing[0]}")
    if on_time := sorted(set(ours) - expected):
        problems.append(f"{len(on_time):,} payments on the late topic that were on time, e.g. {on_time[0]}")
    if ours.total() != len(ours):
        problems.append(f"{ours.total() - len(ours):,} late payments routed more than once")
    if counted != routed.total():  # also those of earlier runs it routed, if any
        problems.append(f"the app counted {counted:,} late records but routed {routed.total():,}")
    return problems


@dataclass(frozen=True)
class Outcome:
    """A run of the demo: what its payments make, what the app sent, and what is wrong (nothing, when all is well)."""

    expected: MinuteTotals
    sent: dict[Minute, list[int]]
    late_routed: Counter[str]  # ids on the late topic since the run began
    late_counted: int
    problems: list[str]


def demo(app_yaml: Path, bootstrap: str, count: int, disorder: Disorder, seed: int, timeout_s: float) -> Outcome:
    """Produce, run, read back and check."""
    config = load_app(ROOT / app_yaml)
    app = MinuteApp.of(config)
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    first_ms = asyncio.run(
        start_after(bootstrap, app.input, partitions[app.input], created_at, app.size_ms + app.grace_ms)
    )

    def payments_from(start_ms: int) -> list[Payment]:
        return list(make_payments(count, invalid_ratio=0, seed=seed, start_ms=start_ms, disorder=disorder,
                                  key_field="account"))  # fmt: skip

    payments = payments_from(first_ms)
    if reaches_past_the_clock(max(created_at(payment.value) for payment in payments)):
        start_over(app_yaml, bootstrap, app.input, partitions[app.input])
        first_ms = a_day_ago()
        payments = payments_from(first_ms)
    expected = expected_totals(payments, partitions[app.input], app.size_ms, app.grace_ms)
    before = asyncio.run(end_offsets(bootstrap, {topic: partitions[topic] for topic in (app.output, app.late_topic)}))
    started = time.perf_counter()
    asyncio.run(produce_payments(bootstrap, app.input, iter(payments)))
    last_ms = max(created_at(payment.value) for payment in payments)
    print(f"produced {count:,} payments to '{app.input}' in {time.perf_counter() - started:.1f} s (seed {seed}), "
          f"created {clock(first_ms)} to {clock(last_ms)}: {expected.out_of_order:,} came after a later payment "
          f"of their partition, {len(expected.late):,} of them after their minute had closed")  # fmt: skip

    code, log = run_app(app_yaml, bootstrap, timeout_s)
    if code != 0:
        print(log[-3000:], file=sys.stderr)
        return Outcome(expected, {}, Counter(), 0, [f"the app exited with code {code}"])
    sent = asyncio.run(read_windows(bootstrap, before, app.output, first_ms, account_and_currency))
    routed = asyncio.run(read_ids(bootstrap, before, app.late_topic, late_payment_id))
    counted = late_counted(log)
    report(app, expected, sent, routed, counted)
    ids = {str(msgpack.unpackb(payment.value)["payment_id"]) for payment in payments}
    problems = check_windows(expected.closed, sent, "minute") + check_late(expected.late, routed, ids, counted)
    return Outcome(expected, sent, routed, counted, problems)


def report(app: MinuteApp, expected: MinuteTotals, sent: Mapping[Minute, list[int]], routed: Counter[str],
           counted: int) -> None:  # fmt: skip
    """What came out, and one account's minutes for a look."""
    print(f"  {app.output:<24}{len(sent):>9,} minute totals of this run's payments "
          f"({len(expected.still_open):,} more minutes still open: they close when later payments come)")  # fmt: skip
    print(f"  {app.late_topic:<24}{routed.total():>9,} payments (the app counted {counted:,} late records)")
    if not sent:
        return
    account = Counter(key[0] for key, _, _ in sent).most_common(1)[0][0]
    minutes = sorted((start, key[1], results[-1]) for (key, start, _), results in sent.items() if key[0] == account)
    shown = ", ".join(f"{clock(start)[11:16]} {money({currency: total})}" for start, currency, total in minutes[:4])
    print(f"  e.g. account {account}: {shown}{', ...' if len(minutes) > 4 else ''}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.minute_totals.run",
        description="Produce payments out of order, run the per-minute totals app, check its totals and late payments.",
    )
    parser.add_argument("--count", type=int, default=50_000, help="payments to produce (default 50000)")
    add_disorder_options(parser, delayed_share=0.1, max_delay_s=15, late=(0.005, 90))

    def run(bootstrap: str, args: argparse.Namespace, disorder: Disorder, seed: int) -> list[str]:
        return demo(APP_YAML, bootstrap, args.count, disorder, seed, args.timeout).problems

    return run_demo(parser, argv, run, "OK: every minute that closed was sent once with the total of its payments "
                                       "on time, and every late payment was counted and set aside")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
