"""The merchant totals example's demo against a real broker, twice: payments keyed by account summed per
merchant and minute through the app's repartition topic, which is purged of what the app read."""

from __future__ import annotations

from pathlib import Path

import examples.merchant_totals.run as merchants
from tests.conftest import TopicNamer
from tests.support.example_apps import renamed


def test_each_merchants_minute_total_equals_the_sum_of_its_payments(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    path = renamed(merchants.APP_YAML, topic_name, tmp_path / "state", ("output",))
    assert merchants.demo(path, kafka_bootstrap, 4_000, seed=1, timeout_s=120) == []
    assert merchants.demo(path, kafka_bootstrap, 4_000, seed=2, timeout_s=120) == []
