"""The enrichment example's demo against a real broker, twice: the accounts first, then the payments
first; each payment joined with its account as it was at the payment's time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import examples.enrichment.run as enrichment
from examples.payments.run import ROOT
from tests.conftest import TopicNamer


def example_app(topic_name: TopicNamer, state_dir: Path) -> dict[str, Any]:
    """The example's app YAML with this test's own topic names, app id and state dir."""
    app: dict[str, Any] = yaml.safe_load((ROOT / enrichment.APP_YAML).read_text())
    names = {topic: topic_name(topic) for topic in app["topics"]}
    app["app_id"] = topic_name("app")
    app["topics"] = {names[topic]: spec for topic, spec in app["topics"].items()}
    [processor] = app["processors"]
    processor["inputs"] = [names[topic] for topic in processor["inputs"]]
    processor["outputs"] = [names[topic] for topic in processor["outputs"]]
    processor["tables"] = {name: {"topic": names[table["topic"]]} for name, table in processor["tables"].items()}
    processor["params"]["output"] = names[processor["params"]["output"]]
    app["state_dir"] = str(state_dir)
    return app


def test_each_payment_joins_its_account_as_of_its_time_whichever_topic_comes_first(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(example_app(topic_name, tmp_path / "state")))
    assert enrichment.demo(path, kafka_bootstrap, 200, 3_000, seed=2, timeout_s=120) == []
    assert enrichment.demo(path, kafka_bootstrap, 200, 3_000, seed=3, timeout_s=120) == []
