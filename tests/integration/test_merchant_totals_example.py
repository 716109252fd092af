"""The merchant totals example's demo against a real broker, twice: payments keyed by account summed per
merchant and minute through the app's repartition topic, which is purged of what the app read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import examples.merchant_totals.run as merchants
from examples.payments.run import ROOT
from tests.conftest import TopicNamer


def example_app(topic_name: TopicNamer, state_dir: Path) -> dict[str, Any]:
    """The example's app YAML with this test's own topic names, app id and state dir."""
    app: dict[str, Any] = yaml.safe_load((ROOT / merchants.APP_YAML).read_text())
    names = {topic: topic_name(topic) for topic in app["topics"]}
    app["app_id"] = topic_name("app")
    app["topics"] = {names[topic]: spec for topic, spec in app["topics"].items()}
    [processor] = app["processors"]
    processor["inputs"] = [names[topic] for topic in processor["inputs"]]
    processor["outputs"] = [names[topic] for topic in processor["outputs"]]
    processor["params"]["output"] = names[processor["params"]["output"]]
    app["state_dir"] = str(state_dir)
    return app


def test_each_merchants_minute_total_equals_the_sum_of_its_payments(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(example_app(topic_name, tmp_path / "state")))
    assert merchants.demo(path, kafka_bootstrap, 4_000, seed=1, timeout_s=120) == []
    assert merchants.demo(path, kafka_bootstrap, 4_000, seed=2, timeout_s=120) == []
