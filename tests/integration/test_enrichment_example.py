"""The enrichment example's demo against a real broker, twice: the accounts first, then the payments
first; each payment joined with its account as it was at the payment's time."""

from __future__ import annotations

from pathlib import Path

import examples.enrichment.run as enrichment
from tests.conftest import TopicNamer
from tests.support.example_apps import renamed


def test_each_payment_joins_its_account_as_of_its_time_whichever_topic_comes_first(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    path = renamed(enrichment.APP_YAML, topic_name, tmp_path / "state", ("output",))
    assert enrichment.demo(path, kafka_bootstrap, 200, 3_000, seed=2, timeout_s=120) == []
    assert enrichment.demo(path, kafka_bootstrap, 200, 3_000, seed=3, timeout_s=120) == []
