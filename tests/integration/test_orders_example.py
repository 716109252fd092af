"""The orders example's demo against the test's broker and PostgreSQL: orders placed with their outbox rows
while the app runs, every order counted once in the customers' totals it writes back."""

from __future__ import annotations

from pathlib import Path

import pytest

import examples.orders.run as orders
from tests.conftest import TopicNamer
from tests.support.example_apps import renamed


def test_every_order_reaches_the_totals_in_postgresql_once(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    path = renamed(orders.APP_YAML, topic_name, tmp_path / "state", ("output",))
    assert orders.demo(path, kafka_bootstrap, 1_500, 50, seed=3, timeout_s=120) == []
