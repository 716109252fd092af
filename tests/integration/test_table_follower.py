"""Seed 000 from a real database: the acquirers example's reference table followed from PostgreSQL into its
compacted topic (snapshot, then each change), read by the global store that routes the payments."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from examples.acquirers import from_postgres
from examples.acquirers.generate import Payment, Terminal, change_terminals, make_payments, make_terminals, table
from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.support.example_apps import renamed
from tests.support.kafka_helpers import produce, read_topic

ROUTES = {"ACQ-NORTH": "payments-acq-north", "ACQ-SOUTH": "payments-acq-south"}
FIELDS = {"id": "id", "terminalId": "terminal_id", "acquirerId": "acquirer_id", "isActive": "is_active",
          "updateDate": "update_date"}  # fmt: skip


async def write_rows(dsn: str, name: str, terminals: list[Terminal]) -> None:
    """Insert or update each terminal's row; every write sets the row's version (update_date)."""
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            f"CREATE TABLE IF NOT EXISTS {name} (id bigint, terminal_id text PRIMARY KEY, acquirer_id text NOT NULL, "
            "is_active boolean NOT NULL, update_date timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        await connection.executemany(
            f"INSERT INTO {name} (id, terminal_id, acquirer_id, is_active) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (terminal_id) DO UPDATE SET acquirer_id = excluded.acquirer_id, "
            "is_active = excluded.is_active, update_date = clock_timestamp()",
            [(t.row_id, t.terminal_id, t.acquirer_id, t.active) for t in terminals],
        )
    finally:
        await connection.close()


async def routed(bootstrap: str, topic_name: TopicNamer, payments: list[Payment]) -> dict[str, str]:
    """Where each payment went, once all of them came out."""
    await produce(bootstrap, topic_name("card-payments"), [(p.key, p.value) for p in payments])
    outputs = [topic_name(topic) for topic in [*ROUTES.values(), "payments-unrouted"]]
    wanted = {p.payment_id for p in payments}
    found: dict[str, str] = {}
    for _ in range(300):
        found = {r.key.decode(): topic for topic in outputs for r in await read_topic(bootstrap, topic)}
        if wanted <= set(found):
            break
        await asyncio.sleep(0.2)
    return {payment_id: found.get(payment_id, "nowhere") for payment_id in wanted}


def expected(topic_name: TopicNamer, payments: list[Payment], rows: list[Terminal]) -> dict[str, str]:
    acquirer_of = table(rows)
    return {p.payment_id: topic_name(ROUTES.get(acquirer_of.get(p.terminal_id) or "", "payments-unrouted"))
            for p in payments}  # fmt: skip


async def read_at_least(bootstrap: str, topic: str, count: int) -> list[Any]:
    rows: list[Any] = []
    for _ in range(300):
        rows = await read_topic(bootstrap, topic)
        if len(rows) >= count:
            break
        await asyncio.sleep(0.2)
    return rows


def test_the_global_store_follows_the_table_in_postgresql(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    name = f"terminal_acquirer_{uuid.uuid4().hex[:8]}"
    path = renamed(Path("examples/acquirers/app.yaml"), topic_name, tmp_path / "state", ("routes", "unrouted"))
    app: dict[str, Any] = yaml.safe_load(path.read_text())
    reference = topic_name("terminal-acquirer")
    app["table_followers"] = {"terminals": {"dsn": postgres_url, "table": name, "topic": reference,
                                            "key_column": "terminal_id", "version_column": "update_date",
                                            "fields": FIELDS, "settle_ms": 500, "poll_interval_ms": 100}}  # fmt: skip
    rng = random.Random(5)
    terminals = make_terminals(40, rng)
    changed = change_terminals(terminals, 0.5, rng)

    async def scenario() -> list[Any]:
        await write_rows(postgres_url, name, terminals)
        worker = Worker(parse_app(app), kafka_bootstrap)
        running = asyncio.create_task(worker.run())
        try:
            await read_at_least(kafka_bootstrap, reference, len(terminals))  # the snapshot
            before = make_payments(100, terminals, 0.1, rng)
            assert await routed(kafka_bootstrap, topic_name, before) == expected(topic_name, before, terminals)
            await write_rows(postgres_url, name, changed)  # half the terminals move or close
            await read_at_least(kafka_bootstrap, reference, len(terminals) + len(changed))
            await asyncio.sleep(1.0)  # the global store follows its topic
            after = make_payments(100, terminals, 0.1, rng)
            now = [*terminals, *changed]  # the table as it is now
            assert await routed(kafka_bootstrap, topic_name, after) == expected(topic_name, after, now)
        finally:
            worker.stop()
            await running
        again = Worker(parse_app(app), kafka_bootstrap)  # resumes after the position: no second snapshot
        running = asyncio.create_task(again.run())
        await asyncio.sleep(3.0)
        again.stop()
        await running
        return await read_topic(kafka_bootstrap, reference)

    rows = asyncio.run(scenario())
    assert len(rows) == len(terminals) + len(changed)  # each version once: the snapshot, the changes, no more
    latest = {r.key.decode(): json.loads(r.value) for r in rows}
    assert {t: (v["acquirerId"] if v["isActive"] else None) for t, v in latest.items()} == table([*terminals, *changed])
    assert set(latest[terminals[0].terminal_id]) == set(FIELDS)


def test_the_acquirers_example_runs_from_postgresql(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    path = renamed(from_postgres.APP_YAML, topic_name, tmp_path / "state", ("routes", "unrouted"))
    assert from_postgres.demo(path, kafka_bootstrap, 300, 500, seed=4, timeout_s=120) == []
