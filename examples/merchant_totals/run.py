"""Totals per merchant and minute from payments keyed by account, through a repartition topic:
`python -m examples.merchant_totals.run` (`make example-merchants`).

Starts (or reuses) a local Kafka broker, writes payments keyed by account (each of a random merchant) to
`merchant-payments`, and runs the app as a user would, `python -m runtime examples/merchant_totals/app.yaml
--until-caught-up`. Its processor re-keys the payments by merchant through the app's own repartition
topic and sums each merchant's payments per minute. The demo reads the totals back and checks each
merchant's last total of each minute against the sums computed here, and that the repartition topic was
purged of what the app read. Each run's payments come after those already in the topic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from examples.acquirers.run import run_app
from examples.demo_cli import run_plain_demo
from examples.payments.run import ROOT, end_offsets, ensure_topics, scan
from examples.timeline import start_after
from runtime.config import load_app

APP_YAML = Path("examples/merchant_totals/app.yaml")  # relative to ROOT, as a user would type it
MINUTE_MS = 60_000


def payments(count: int, start_ms: int, seed: int) -> list[tuple[str, dict[str, object]]]:
    rng = random.Random(seed)
    out, now = [], start_ms
    for n in range(count):
        now += rng.randint(0, 20)
        account = f"acc-{rng.randrange(2_000):04d}"
        merchant = f"m-{rng.randrange(60):03d}"
        out.append((account, {"id": f"pay-{start_ms}-{n}", "account": account, "merchant": merchant,
                              "amount_minor": rng.randrange(100, 50_000), "at": now}))  # fmt: skip
    return out


async def produce(bootstrap: str, topic: str, batch: list[tuple[str, dict[str, object]]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for key, value in batch:
            await producer.send(topic, orjson.dumps(value), key=key.encode(), timestamp_ms=int(str(value["at"])))
        await producer.flush()
    finally:
        await producer.stop()


async def purged(bootstrap: str, topic: str, partitions: int) -> bool:
    """Whether the repartition topic holds nothing the app has read: its first offsets are its ends."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return bool(await consumer.beginning_offsets(tps) == await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


def demo(app_yaml: Path, bootstrap: str, count: int, seed: int, timeout_s: float) -> list[str]:
    """One run: payments written, the app run, its totals checked; what went wrong (nothing, when all is well)."""
    config = load_app(ROOT / app_yaml)
    stage, processor = config.processors
    source, output, repartition = stage.inputs[0], processor.outputs[0], processor.repartition_topic
    assert repartition is not None, "the example's processor re-keys its input"
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    before = asyncio.run(end_offsets(bootstrap, {output: partitions[output]}))
    start = asyncio.run(start_after(bootstrap, source, partitions[source],
                                    lambda value: int(json.loads(value)["at"]), MINUTE_MS))  # fmt: skip
    batch = payments(count, start, seed)
    print(f"writing {count:,} payments keyed by account (seed {seed}) to '{source}'")
    asyncio.run(produce(bootstrap, source, batch))
    code, log = run_app(app_yaml, bootstrap, timeout_s)
    if code != 0:
        return [f"the app exited with {code}:\n{log[-3000:]}"]
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for _, payment in batch:
        minute = int(str(payment["at"])) // MINUTE_MS * MINUTE_MS
        expected[(str(payment["merchant"]), minute)] += int(str(payment["amount_minor"]))
    found: dict[tuple[str, int], int] = {}
    tps = [TopicPartition(output, p) for p in range(partitions[output])]
    asyncio.run(scan(bootstrap, tps, before, lambda key, value: found.update(
        {((key or b"").decode(), json.loads(value)["start"]): json.loads(value)["value"]})))  # fmt: skip
    print(f"  minutes of merchants read back: {len(found):,} of {len(expected):,}")
    problems = []
    if missing := sorted(set(expected) - set(found)):
        problems.append(f"{len(missing):,} merchant minutes missing, e.g. {missing[0]}")
    wrong = [where for where in expected if where in found and found[where] != expected[where]]
    if wrong:
        problems.append(f"{len(wrong):,} totals wrong, e.g. {wrong[0]}: {found[wrong[0]]} for {expected[wrong[0]]}")
    if not asyncio.run(purged(bootstrap, repartition, partitions[repartition])):
        problems.append(f"the repartition topic {repartition} still holds records the app read")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.merchant_totals.run", description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=30_000, help="payments to write (default 30000)")
    return run_plain_demo(
        parser,
        argv,
        lambda bootstrap, args, seed: demo(APP_YAML, bootstrap, args.payments, seed, args.timeout),
        "OK: every merchant's minute total equals its payments' sum, and the repartition topic was purged",
    )


if __name__ == "__main__":
    sys.exit(main())
