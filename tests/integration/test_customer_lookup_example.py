"""The customer lookup example's demo against the test's broker and PostgreSQL: orders enriched with their
customer by lookups in flight together, every order out once and each customer's in the order they went in."""

from __future__ import annotations

from pathlib import Path

import pytest

import examples.customer_lookup.run as customer_lookup
from tests.conftest import TopicNamer
from tests.support.example_apps import renamed


def test_every_order_comes_out_once_with_its_customer_and_in_its_customers_order(
    kafka_bootstrap: str, postgres_url: str, topic_name: TopicNamer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    path = renamed(customer_lookup.APP_YAML, topic_name, tmp_path / "state", ("output", "unknown"))
    assert customer_lookup.demo(path, kafka_bootstrap, 500, 8_000, seed=5, timeout_s=120) == []
