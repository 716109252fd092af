"""An example's app YAML with a test's own topic names, app id and state directory, so the example's demo
runs against the test's broker beside the other tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from examples.payments.run import ROOT
from tests.conftest import TopicNamer


def renamed(app_yaml: Path, topic_name: TopicNamer, state_dir: Path, param_topics: tuple[str, ...] = ()) -> Path:
    """The example's YAML rewritten into `state_dir`'s parent: every topic renamed where the processors name
    it (inputs, broadcast, outputs, tables, and the params fields `param_topics`: a topic, or a mapping
    to topics) and where global stores, outboxes and table followers do; returns its path."""
    app: dict[str, Any] = yaml.safe_load((ROOT / app_yaml).read_text())
    names = {topic: topic_name(topic) for topic in app["topics"]}
    app["app_id"] = topic_name("app")
    app["topics"] = {names[topic]: spec for topic, spec in app["topics"].items()}
    for processor in app["processors"]:
        for field in ("inputs", "broadcast", "outputs"):
            if field in processor:
                processor[field] = [names[topic] for topic in processor[field]]
        for table in processor.get("tables", {}).values():
            table["topic"] = names[table["topic"]]
        params = processor.get("params", {})
        for field in param_topics:
            if isinstance(params.get(field), dict):  # topics by name, as `routes: {ACQ-NORTH: payments-acq-north}`
                params[field] = {name: names[topic] for name, topic in params[field].items()}
            elif field in params:
                params[field] = names[params[field]]
    sources = [*app.get("outboxes", {}).values(), *app.get("table_followers", {}).values()]
    for store in [*app.get("global_stores", {}).values(), *sources]:
        if "topic" in store:
            store["topic"] = names[store["topic"]]
    app["state_dir"] = str(state_dir)
    path = state_dir.parent / "app.yaml"
    path.write_text(yaml.safe_dump(app))
    return path
