"""The account activity example's demo against the test's broker: one account's two hours replayed from its
partition alone, every record replayed once by replay jobs of which one's worker is killed -9 half-way,
and each event made unique by the de-duplication."""

from __future__ import annotations

from pathlib import Path

import examples.account_activity.run as account_activity
from tests.conftest import TopicNamer
from tests.support.example_apps import renamed


def test_replays_and_deduplication_of_five_days_of_account_activity(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    path = renamed(account_activity.APP_YAML, topic_name, tmp_path / "state", ("output",))
    assert account_activity.demo(path, kafka_bootstrap, 60_000, 100, seed=5, timeout_s=120) == []
