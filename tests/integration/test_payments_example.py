"""The payments example's app YAML against a real broker: totals exact, after replays and kill -9."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from examples.payments.generate import Payment, make_payments, produce_payments
from examples.payments.run import APP_YAML, ROOT, Totals, added_totals, end_offsets, unread
from examples.payments.totals import AccountTotals
from processors import Context, Record
from runtime.config import AppConfig, parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, read_topic
from tests.support.kills import FAST_FAILOVER
from tests.support.running import spawn_worker, write_app

pytestmark = pytest.mark.anyio

PARTITIONS = 2


class SlowAccountTotals(AccountTotals):
    """AccountTotals at about 2,000 payments/s per task, so a kill lands mid-stream."""

    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        if record.offset % 20 == 0:
            await asyncio.sleep(0.01)
        super().process(record, ctx)


def payments_app(topic_name: TopicNamer, state_dir: Path, bootstrap: str) -> dict[str, Any]:
    """examples/payments/app.yaml with this test's own topic names, app id and state dir."""
    app: dict[str, Any] = yaml.safe_load((ROOT / APP_YAML).read_text())
    names = {topic: topic_name(topic) for topic in app["topics"]}
    app["app_id"] = topic_name("app")
    app["kafka"] = {"bootstrap_servers": bootstrap}
    app["topics"] = {names[topic]: {**spec, "partitions": PARTITIONS} for topic, spec in app["topics"].items()}
    for processor in app["processors"]:
        processor["inputs"] = [names[topic] for topic in processor["inputs"]]
        processor["outputs"] = [names[topic] for topic in processor["outputs"]]
        params = processor["params"]
        processor["params"] = {k: names[v] if k.endswith("_topic") else v for k, v in params.items()}
    app["state_dir"] = str(state_dir)
    app["commit_interval_ms"] = 200
    return app


def topic(config: AppConfig, processor: int, kind: str) -> str:
    return str(getattr(config.processors[processor], kind)[0])


async def produce(config: AppConfig, bootstrap: str, count: int, seed: int) -> list[Payment]:
    source = topic(config, 0, "inputs")
    await create_topic(bootstrap, source, PARTITIONS)
    payments = list(make_payments(count, invalid_ratio=0.05, seed=seed, poison_ratio=0.001))
    await produce_payments(bootstrap, source, iter(payments))
    return payments


async def drain(config: AppConfig, bootstrap: str) -> int:
    """Run the app until caught up, again while its group has unread input; the number of passes."""
    inputs = dict.fromkeys(config.input_topics(), PARTITIONS)
    for passes in range(1, 5):
        await asyncio.wait_for(Worker(config, bootstrap, until_caught_up=True).run(), 120)
        if not any((await unread(bootstrap, config.app_id, inputs)).values()):
            return passes
    raise AssertionError("the app's inputs still have unread records after 4 passes")


async def latest_totals(config: AppConfig, bootstrap: str) -> dict[str, Totals]:
    latest: dict[str, Totals] = {}
    for record in await read_topic(bootstrap, topic(config, 1, "outputs")):  # in offset order per partition
        assert record.key is not None
        latest[record.key.decode()] = json.loads(record.value)
    return latest


async def rewind(bootstrap: str, group: str, partitions: Mapping[str, int]) -> None:
    """Commit offset 0 for the group: as if every record were delivered again."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(name, p) for name, count in partitions.items() for p in range(count)]
        consumer.assign(tps)
        await consumer.commit(dict.fromkeys(tps, 0))
    finally:
        await consumer.stop()


async def test_totals_are_exact_and_a_full_replay_counts_nothing_twice(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    config = parse_app(payments_app(topic_name, tmp_path / "state", kafka_bootstrap))
    payments = await produce(config, kafka_bootstrap, 4000, seed=11)
    # One pass: the run follows payments-valid, which the validator fills during the same run.
    assert await drain(config, kafka_bootstrap) == 1
    expected = added_totals(payments)
    assert await latest_totals(config, kafka_bootstrap) == expected

    changelog = {config.changelog_topic("account-totals"): PARTITIONS}
    changelog_ends = await end_offsets(kafka_bootstrap, changelog)
    valid = topic(config, 1, "inputs")
    # Every valid payment comes again, and the local state is gone: the store is restored from its
    # changelog and must recognise each payment as counted already.
    await rewind(kafka_bootstrap, config.app_id, {valid: PARTITIONS})
    shutil.rmtree(tmp_path / "state")
    assert await drain(config, kafka_bootstrap) == 1
    assert await latest_totals(config, kafka_bootstrap) == expected
    assert await end_offsets(kafka_bootstrap, changelog) == changelog_ends, "a redelivered payment was counted"


async def test_totals_stay_exact_when_the_totals_stage_is_killed(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app = payments_app(topic_name, tmp_path / "state", kafka_bootstrap)
    config = parse_app(app)
    payments = await produce(config, kafka_bootstrap, 30_000, seed=12)
    # Validate everything first, so payments-valid holds each valid payment once, then kill the
    # totals stage mid-stream three times: its replays must not count a payment twice.
    await asyncio.wait_for(Worker(config, kafka_bootstrap, until_caught_up=True).run(), 120)
    app["processors"][1]["class"] = f"{__name__}:SlowAccountTotals"
    app["kafka"]["consumer"] = FAST_FAILOVER
    path = write_app(tmp_path, app)
    for _ in range(3):
        victim = spawn_worker(path)
        await asyncio.sleep(3)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    last = spawn_worker(path, "--until-caught-up")
    assert last.wait(timeout=180) == 0
    assert not any((await unread(kafka_bootstrap, config.app_id, {topic(config, 1, "inputs"): PARTITIONS})).values())
    assert await latest_totals(config, kafka_bootstrap) == added_totals(payments)
