"""The end-to-end demo: `python -m examples.payments.run` (what `make example` runs).

Starts (or reuses) a local Kafka broker, produces payments, runs the payments app until it has
caught up, then reads its outputs back and checks that every payment of this run came out on the
topic it belongs to, and that each account's totals grew by exactly the valid payments of this run.
Then runs totals_to_postgres.yaml, which writes the totals to PostgreSQL (DATABASE_URL, else the
local development PostgreSQL, started here) exactly once, and checks the table against the topic.
Topics and state outlive a run in the dev broker, so only what this run added counts: output end
offsets and the accounts' totals are recorded before producing, and payment ids are new each run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import asyncpg
import msgpack
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from examples.broker import database, kafka
from examples.payments.generate import INVALID, POISON, VALID, Payment, make_payments, produce_payments
from runtime.config import AppConfig, load_app
from runtime.kafka.topics import ensure_topics as create_app_topics

ROOT = Path(__file__).resolve().parents[2]
APP_YAML = Path("examples/payments/app.yaml")  # relative to ROOT, as a user would type it
INPUT, VALID_TOPIC, REJECTED_TOPIC = "payments", "payments-valid", "payments-rejected"
TOTALS_TOPIC = "account-totals"
TO_POSTGRES_YAML = Path("examples/payments/totals_to_postgres.yaml")  # the totals into PostgreSQL
ACCOUNT_TOTALS = ("CREATE TABLE IF NOT EXISTS account_totals "
                  "(account text PRIMARY KEY, payments bigint NOT NULL, totals jsonb NOT NULL)")  # fmt: skip
SETTLE_S = 30.0  # the longest the commit markers of an exited app's last transactions are waited for
MAX_PASSES = 4  # --until-caught-up runs; one more than the app's stages is always enough

Offsets = dict[TopicPartition, int]
Totals = dict[str, Any]  # {"count": n, "totals": {currency: minor units}}, as in the topic account-totals


async def ensure_topics(bootstrap: str, config: AppConfig) -> dict[str, int]:
    """Create the app's topics that are missing, as the worker does at start; return partition counts."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await create_app_topics(admin, config)
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, partitions: dict[str, int]) -> Offsets:
    return await high_watermarks(bootstrap, [TopicPartition(topic, p) for topic, count in partitions.items()
                                             for p in range(count)])  # fmt: skip


async def high_watermarks(bootstrap: str, tps: list[TopicPartition]) -> Offsets:
    """The offsets after the last records of `tps`, committed or not."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        ends: Offsets = await consumer.end_offsets(tps)
        return ends
    finally:
        await consumer.stop()


async def scan(
    bootstrap: str, tps: list[TopicPartition], start: Offsets | None, visit: Callable[[bytes | None, bytes], None]
) -> Offsets:
    """Call `visit` with each record of `tps` from `start` (None: the beginning) to their current end,
    committed records only, as an app's consumers read them (an app under exactly-once writes in
    transactions)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await settled_ends(bootstrap, consumer, tps)
        first: Offsets = await consumer.beginning_offsets(tps) if start is None else start
        for tp in tps:
            consumer.seek(tp, first[tp])
        remaining = {tp for tp in tps if first[tp] < ends[tp]}
        while remaining:
            for tp, messages in (await consumer.getmany(*remaining, timeout_ms=1000)).items():
                for message in messages:
                    if message.offset < ends[tp]:
                        visit(message.key, message.value)
            remaining = {tp for tp in remaining if await consumer.position(tp) < ends[tp]}
        return ends
    finally:
        await consumer.stop()


async def settled_ends(bootstrap: str, committed: AIOKafkaConsumer, tps: list[TopicPartition]) -> Offsets:
    """How far the read_committed consumer `committed` can read, once the transactions of an app that
    has exited are settled: the broker writes a transaction's commit markers a moment after it told the
    producer it committed, and until then its records are not readable. An app still running may commit
    more meanwhile, taking the readable ends past the high watermarks read first: those are settled too."""
    high = await high_watermarks(bootstrap, tps)
    deadline = time.monotonic() + SETTLE_S
    while True:
        ends: Offsets = await committed.end_offsets(tps)
        if all(ends[tp] >= high[tp] for tp in tps) or time.monotonic() > deadline:
            return ends
        await asyncio.sleep(0.1)


async def read_ids(
    bootstrap: str, start: Offsets, topic: str, payment_id: Callable[[bytes | None, bytes], str]
) -> Counter[str]:
    """How often each payment id occurs in `topic` between `start` and the current end offsets."""
    ids: Counter[str] = Counter()

    def count(key: bytes | None, value: bytes) -> None:
        ids[payment_id(key, value)] += 1

    await scan(bootstrap, [tp for tp in start if tp.topic == topic], start, count)
    return ids


async def read_totals(
    bootstrap: str, tps: list[TopicPartition], start: Offsets | None, accounts: Iterable[str]
) -> tuple[dict[str, Totals], Offsets]:
    """The latest totals of `accounts` in `tps` from `start` (None: the beginning); the end offsets read to."""
    wanted = {account.encode() for account in accounts}
    latest: dict[str, Totals] = {}

    def keep(key: bytes | None, value: bytes) -> None:
        if key in wanted:
            latest[key.decode()] = json.loads(value)

    ends = await scan(bootstrap, tps, start, keep)
    return latest, ends


async def unread(bootstrap: str, group: str, partitions: Mapping[str, int]) -> dict[str, int]:
    """Records per topic that the consumer group has not committed yet (its lag)."""
    tps = [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await admin.start()
    try:
        await consumer.start()
        try:
            committed = await admin.list_consumer_group_offsets(group, partitions=tps)
            firsts, ends = await consumer.beginning_offsets(tps), await consumer.end_offsets(tps)
        finally:
            await consumer.stop()
    finally:
        await admin.close()
    lag = dict.fromkeys(partitions, 0)
    for tp in tps:
        position = committed[tp].offset if tp in committed and committed[tp].offset >= 0 else firsts[tp]
        lag[tp.topic] += max(0, ends[tp] - position)
    return lag


def valid_id(key: bytes | None, value: bytes) -> str:
    return str(msgpack.unpackb(value)["payment_id"])  # keyed by account: the id is in the value


def rejected_id(key: bytes | None, value: bytes) -> str:
    return key.decode() if key is not None else str(json.loads(value).get("payment_id"))


def dead_letter_id(key: bytes | None, value: bytes) -> str:
    return key.decode(errors="replace") if key is not None else ""  # the original key, kept as is


def run_app(bootstrap: str, timeout_s: float) -> tuple[int, float]:
    """Run the app as a user would, until it has caught up; return its exit code and wall time."""
    command = [sys.executable, "-m", "runtime", str(APP_YAML), "--until-caught-up"]
    print(f"running: {' '.join(['python', *command[1:]])}", flush=True)
    started = time.perf_counter()
    try:
        result = subprocess.run(
            command, cwd=ROOT, env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        print(f"error: the app did not catch up within {timeout_s:.0f} s", file=sys.stderr)
        return 1, time.perf_counter() - started
    return result.returncode, time.perf_counter() - started


def run_until_drained(
    bootstrap: str, group: str, inputs: Mapping[str, int], timeout_s: float
) -> tuple[int, list[float]]:
    """Run the app with --until-caught-up until its group has read every input to the end; the pass times.

    A pass stops at the end offsets its inputs had when it started, so the records the validator
    writes to payments-valid during a pass are added up by the totals stage in the next pass.
    """
    times: list[float] = []
    while len(times) < MAX_PASSES:
        code, elapsed = run_app(bootstrap, timeout_s)
        times.append(elapsed)
        if code != 0:
            return code, times
        lag = {topic: n for topic, n in asyncio.run(unread(bootstrap, group, inputs)).items() if n}
        if not lag:
            return 0, times
        waiting = ", ".join(f"{n:,} in {topic}" for topic, n in lag.items())
        print(f"pass {len(times)} done in {elapsed:.1f} s; not read yet: {waiting} (written during the pass)")
    print(f"error: the app's inputs still have records after {MAX_PASSES} passes", file=sys.stderr)
    return 1, times


def check(expected: dict[str, str], found: dict[str, tuple[str, Counter[str]]]) -> list[str]:
    """What is wrong with this run's outputs; `found` maps each kind to its topic and the ids read there."""
    problems = []
    for kind, (topic, ids) in found.items():
        want = {key for key, k in expected.items() if k == kind}
        got = set(ids) & set(expected)
        if missing := want - got:
            problems.append(f"{len(missing):,} {kind} payments missing from {topic}, e.g. {min(missing)}")
        if misplaced := got - want:
            problems.append(f"{len(misplaced):,} payments in {topic} that are not {kind}, e.g. {min(misplaced)}")
    return problems


def added_totals(payments: Iterable[Payment]) -> dict[str, Totals]:
    """What the valid ones of `payments` add to each account's totals."""
    added: dict[str, Totals] = {}
    for payment in payments:
        if payment.kind != VALID:
            continue
        value = msgpack.unpackb(payment.value)
        entry = added.setdefault(value["account"], {"count": 0, "totals": {}})
        entry["count"] += 1
        sums = entry["totals"]
        sums[value["currency"]] = sums.get(value["currency"], 0) + value["amount_minor"]
    return added


def growth(before: Totals | None, after: Totals | None) -> Totals:
    """How much an account's totals grew from `before` to `after` (None: no totals yet)."""
    old, new = before or {"count": 0, "totals": {}}, after or {"count": 0, "totals": {}}
    currencies = sorted({*old["totals"], *new["totals"]})
    deltas = {currency: new["totals"].get(currency, 0) - old["totals"].get(currency, 0) for currency in currencies}
    return {"count": new["count"] - old["count"], "totals": {c: delta for c, delta in deltas.items() if delta}}


def check_totals(added: Mapping[str, Totals], before: Mapping[str, Totals], after: Mapping[str, Totals]) -> list[str]:
    """Accounts whose latest totals did not grow by exactly what this run's valid payments add."""
    missing = sorted(account for account in added if account not in after)
    wrong = sorted(
        account
        for account, want in added.items()
        if account in after and growth(before.get(account), after[account]) != want
    )
    problems = []
    if missing:
        problems.append(f"{len(missing):,} accounts of this run missing from {TOTALS_TOPIC}, e.g. {missing[0]}")
    if wrong:
        account = wrong[0]
        got = growth(before.get(account), after[account])
        problems.append(
            f"{len(wrong):,} accounts whose totals in {TOTALS_TOPIC} grew by other sums than this run's payments, "
            f"e.g. {account}: +{got['count']} payments {got['totals']}, expected +{added[account]['count']} "
            f"{added[account]['totals']}"
        )
    return problems


def money(totals: Mapping[str, int]) -> str:
    """`{"RUB": 123456}` as `RUB 1,234.56` (every currency of the example has two decimals)."""
    return ", ".join(f"{currency} {minor // 100:,}.{minor % 100:02d}" for currency, minor in sorted(totals.items()))


def totals_in_postgres(bootstrap: str, latest: Mapping[str, Totals], timeout_s: float) -> list[str]:
    """The totals written to PostgreSQL by totals_to_postgres.yaml, run until it caught up: the same as the
    topic's latest of each account; what differs."""

    async def table() -> dict[str, Totals]:
        connection = await asyncpg.connect(os.environ["DATABASE_URL"])
        try:
            await connection.execute(ACCOUNT_TOTALS)
            rows = await connection.fetch("SELECT * FROM account_totals WHERE account = any($1)", list(latest))
            return {row["account"]: {"count": row["payments"], "totals": json.loads(row["totals"])} for row in rows}
        finally:
            await connection.close()

    asyncio.run(table())
    command = [sys.executable, "-m", "runtime", str(TO_POSTGRES_YAML), "--until-caught-up"]
    print(f"writing the totals to PostgreSQL: {' '.join(['python', *command[1:]])}", flush=True)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    done = subprocess.run(command, cwd=ROOT, env=env, timeout=timeout_s, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return [
            f"writing the totals to PostgreSQL exited with {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
        ]
    written = asyncio.run(table())
    print(f"  {'account_totals (PostgreSQL)':<34}{len(written):>9,} accounts")
    wrong = sorted(account for account in latest if written.get(account) != latest[account])
    if wrong:
        return [f"{len(wrong):,} accounts' totals in PostgreSQL differ from {TOTALS_TOPIC}, e.g. {wrong[0]}: "
                f"{written.get(wrong[0])} for {latest[wrong[0]]}"]  # fmt: skip
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.payments.run",
        description="Produce payments, run the payments app, check its outputs.",
    )
    parser.add_argument("--count", type=int, default=100_000, help="payments to produce (default 100000)")
    parser.add_argument("--invalid-ratio", type=float, default=0.05)
    parser.add_argument("--poison-ratio", type=float, default=0.0001, help="values that go to dead letters")
    parser.add_argument("--seed", type=int, help="default: a new one each run (printed, to reproduce it)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the app may take")
    parser.add_argument("--keep-broker", action="store_true", help="leave a broker started here running")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)

    config = load_app(ROOT / APP_YAML)
    with kafka(args.keep_broker) as bootstrap, database(args.keep_broker):
        return demo(config, bootstrap, args.count, args.invalid_ratio, args.poison_ratio, seed, args.timeout)


def demo(
    config: AppConfig,
    bootstrap: str,
    count: int,
    invalid_ratio: float,
    poison_ratio: float,
    seed: int,
    timeout_s: float,
) -> int:
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    dead_letters = config.dead_letter_topic
    outputs = {t: partitions[t] for t in (VALID_TOPIC, REJECTED_TOPIC, dead_letters)}
    before = asyncio.run(end_offsets(bootstrap, outputs))

    payments = list(make_payments(count, invalid_ratio, seed, poison_ratio))
    expected = {payment.key.decode(): payment.kind for payment in payments}
    added = added_totals(payments)
    # The accounts' totals before this run (usually none: accounts are new with each seed).
    totals_tps = [TopicPartition(TOTALS_TOPIC, p) for p in range(partitions[TOTALS_TOPIC])]
    before_totals, totals_start = asyncio.run(read_totals(bootstrap, totals_tps, None, added))
    started = time.perf_counter()
    produced = asyncio.run(produce_payments(bootstrap, INPUT, iter(payments)))
    elapsed = time.perf_counter() - started
    print(
        f"produced  {count:>9,} payments to '{INPUT}' in {elapsed:.1f} s (seed {seed}): "
        f"{produced[VALID]:,} valid, {produced[INVALID]:,} invalid, {produced[POISON]:,} poison"
    )

    inputs = {topic: partitions[topic] for topic in config.input_topics()}
    code, times = run_until_drained(bootstrap, config.app_id, inputs, timeout_s)
    if code != 0:
        print(f"error: the app exited with code {code}", file=sys.stderr)
        return 1
    elapsed = sum(times)

    topics = {
        VALID: (VALID_TOPIC, valid_id),
        INVALID: (REJECTED_TOPIC, rejected_id),
        POISON: (dead_letters, dead_letter_id),
    }
    found = {
        kind: (topic, asyncio.run(read_ids(bootstrap, before, topic, reader)))
        for kind, (topic, reader) in topics.items()
    }
    outputs_added = sum(ids.total() for _, ids in found.values())  # earlier runs' backlog included
    passes = f" ({len(times)} passes)" if len(times) > 1 else ""
    print(
        f"processed {outputs_added:>9,} payments in {elapsed:.1f} s{passes}: "
        f"{outputs_added / elapsed:,.0f}/s (with start-up)"
    )
    for topic, ids in found.values():
        ours = Counter({key: n for key, n in ids.items() if key in expected})
        notes = []
        if duplicates := ours.total() - len(ours):
            notes.append(f"{duplicates:,} duplicates")
        if others := ids.total() - ours.total():
            notes.append(f"{others:,} from earlier runs")
        print(f"  {topic:<34}{ours.total():>9,}" + (f"  ({', '.join(notes)})" if notes else ""))

    updates, _ = asyncio.run(read_totals(bootstrap, totals_tps, totals_start, added))
    after_totals = {**before_totals, **updates}
    print(f"  {TOTALS_TOPIC:<34}{len(updates):>9,} accounts updated ({len(before_totals):,} of them had totals before)")
    if added:
        sample = max(added, key=lambda account: (added[account]["count"], account))
        if sample in after_totals:
            latest = after_totals[sample]
            print(
                f"  e.g. {sample}: {latest['count']:,} payments, {money(latest['totals'])} "
                f"(this run: +{added[sample]['count']:,}, {money(added[sample]['totals'])})"
            )

    problems = check(expected, found) + check_totals(added, before_totals, after_totals)
    if not problems:
        problems = totals_in_postgres(bootstrap, {account: after_totals[account] for account in added}, timeout_s)
    if problems:
        print("FAILED:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(
        f"OK: each of the {count:,} payments came out on the topic it belongs to, and the totals of "
        f"{len(added):,} accounts grew by exactly their valid payments, in {TOTALS_TOPIC} and in PostgreSQL"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
