"""The CDC merge example's demo against a real broker, twice: the second run's transactions come after the
first's, and the app goes on from the positions the first committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import examples.cdc_merge.run as cdc
from examples.payments.run import ROOT
from tests.conftest import TopicNamer


def example_app(topic_name: TopicNamer, state_dir: Path) -> dict[str, Any]:
    """The example's app YAML with this test's own topic names, app id and state dir."""
    app: dict[str, Any] = yaml.safe_load((ROOT / cdc.APP_YAML).read_text())
    names = {topic: topic_name(topic) for topic in app["topics"]}
    app["app_id"] = topic_name("app")
    app["topics"] = {names[topic]: spec for topic, spec in app["topics"].items()}
    [merge] = app["processors"]
    for field in ("inputs", "broadcast", "outputs"):
        merge[field] = [names[topic] for topic in merge[field]]
    params = merge["params"]
    params.update({field: names[params[field]] for field in ("data", "transactions", "output", "unmatched_topic")})
    app["state_dir"] = str(state_dir)
    return app


def test_the_demo_joins_every_row_once_and_a_second_run_goes_on_from_the_first(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(example_app(topic_name, tmp_path / "state")))
    assert cdc.demo(path, kafka_bootstrap, 150, seed=3, timeout_s=120) == []
    assert cdc.demo(path, kafka_bootstrap, 100, seed=4, timeout_s=120) == []
