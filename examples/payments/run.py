"""The end-to-end demo: `python -m examples.payments.run` (what `make example` runs).

Starts (or reuses) a local Kafka broker, produces payments, runs the validator app until it has
caught up, then reads its outputs back and checks that every payment of this run came out exactly
once, on the topic it belongs to. Topics outlive a run in the dev broker, so only what this run
added counts: output end offsets are recorded before producing, and payment ids are new each run.
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
from collections.abc import Callable
from pathlib import Path

import msgpack
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from examples.payments.generate import INVALID, POISON, VALID, make_payments, produce_payments
from runtime.config import AppConfig, load_app
from runtime.devkafka import managed

ROOT = Path(__file__).resolve().parents[2]
APP_YAML = Path("examples/payments/app.yaml")  # relative to ROOT, as a user would type it
INPUT, VALID_TOPIC, REJECTED_TOPIC = "payments", "payments-valid", "payments-rejected"
TOPIC_EXISTS = 36

Offsets = dict[TopicPartition, int]


async def ensure_topics(bootstrap: str, config: AppConfig) -> dict[str, int]:
    """Create the app's topics that are missing, as the YAML declares them; return partition counts."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = sorted(config.topics)
        for _ in range(100):
            described = await admin.describe_topics(names)
            counts = {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}
            missing = [name for name in names if name not in counts]
            if not missing:
                return counts
            new = [
                NewTopic(
                    name,
                    config.topics[name].partitions,
                    config.topics[name].replication_factor,
                    topic_configs={"cleanup.policy": config.topics[name].cleanup_policy, **config.topics[name].config},
                )
                for name in missing
            ]
            response = await admin.create_topics(new)
            for topic, code, message in response.topic_errors:
                if code not in (0, TOPIC_EXISTS):
                    raise RuntimeError(f"could not create topic {topic}: {message} (error {code})")
            await asyncio.sleep(0.1)
        raise RuntimeError(f"topics {names} were created but do not show up in the cluster metadata")
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, partitions: dict[str, int]) -> Offsets:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]
        ends: Offsets = await consumer.end_offsets(tps)
        return ends
    finally:
        await consumer.stop()


async def read_ids(
    bootstrap: str, start: Offsets, topic: str, payment_id: Callable[[bytes | None, bytes], str]
) -> Counter[str]:
    """How often each payment id occurs in `topic` between `start` and the current end offsets."""
    tps = [tp for tp in start if tp.topic == topic]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, start[tp])
        ids: Counter[str] = Counter()
        remaining = {tp for tp in tps if start[tp] < ends[tp]}
        while remaining:
            for tp, messages in (await consumer.getmany(*remaining, timeout_ms=1000)).items():
                for message in messages:
                    if message.offset < ends[tp]:
                        ids[payment_id(message.key, message.value)] += 1
            remaining = {tp for tp in remaining if await consumer.position(tp) < ends[tp]}
        return ids
    finally:
        await consumer.stop()


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.payments.run",
        description="Produce payments, run the validator app, check its outputs.",
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
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    started_broker = False
    if not bootstrap:
        print("starting the local Kafka broker (the first time downloads Kafka from Maven Central) ...", flush=True)
        broker, started_broker = managed.start()
        bootstrap = broker.bootstrap_servers
        print(f"Kafka at {bootstrap} ({'started now' if started_broker else 'already running'})")
    try:
        return demo(config, bootstrap, args.count, args.invalid_ratio, args.poison_ratio, seed, args.timeout)
    finally:
        if started_broker and not args.keep_broker:
            print("stopping the local Kafka broker")
            managed.stop()


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
    started = time.perf_counter()
    produced = asyncio.run(produce_payments(bootstrap, INPUT, iter(payments)))
    elapsed = time.perf_counter() - started
    print(
        f"produced  {count:>9,} payments to '{INPUT}' in {elapsed:.1f} s (seed {seed}): "
        f"{produced[VALID]:,} valid, {produced[INVALID]:,} invalid, {produced[POISON]:,} poison"
    )

    code, elapsed = run_app(bootstrap, timeout_s)
    if code != 0:
        print(f"error: the app exited with code {code}", file=sys.stderr)
        return 1

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
    print(
        f"processed {outputs_added:>9,} payments in {elapsed:.1f} s: {outputs_added / elapsed:,.0f}/s (with start-up)"
    )
    for topic, ids in found.values():
        ours = Counter({key: n for key, n in ids.items() if key in expected})
        notes = []
        if duplicates := ours.total() - len(ours):
            notes.append(f"{duplicates:,} duplicates")
        if others := ids.total() - ours.total():
            notes.append(f"{others:,} from earlier runs")
        print(f"  {topic:<34}{ours.total():>9,}" + (f"  ({', '.join(notes)})" if notes else ""))

    problems = check(expected, found)
    if problems:
        print("FAILED:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"OK: each of the {count:,} payments came out on the topic it belongs to")
    return 0


if __name__ == "__main__":
    sys.exit(main())
