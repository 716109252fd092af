"""The CDC merge example's demo against a real broker, twice: the second run's transactions come after the
first's, and the app goes on from the positions the first committed."""

from __future__ import annotations

from pathlib import Path

import examples.cdc_merge.run as cdc
from tests.conftest import TopicNamer
from tests.support.example_apps import renamed


def test_the_demo_joins_every_row_once_and_a_second_run_goes_on_from_the_first(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    path = renamed(cdc.APP_YAML, topic_name, tmp_path / "state", ("data", "transactions", "output", "unmatched_topic"))
    assert cdc.demo(path, kafka_bootstrap, 150, seed=3, timeout_s=120) == []
    assert cdc.demo(path, kafka_bootstrap, 100, seed=4, timeout_s=120) == []
