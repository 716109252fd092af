"""The acquirers example's demo against a real broker: payments follow the table, before and after it changes."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from examples.acquirers.generate import make_payments, make_terminals
from examples.acquirers.run import APP_YAML, ROOT, Router, demo, verdict
from examples.payments.run import check
from runtime.config import load_app
from tests.conftest import TopicNamer


def acquirers_app(topic_name: TopicNamer, state_dir: Path) -> dict[str, Any]:
    """examples/acquirers/app.yaml with this test's own topic names, app id and state dir."""
    app: dict[str, Any] = yaml.safe_load((ROOT / APP_YAML).read_text())
    names = {topic: topic_name(topic) for topic in app["topics"]}
    app["app_id"] = topic_name("app")
    app["topics"] = {names[topic]: spec for topic, spec in app["topics"].items()}
    for store in app["global_stores"].values():
        store["topic"] = names[store["topic"]]
    for processor in app["processors"]:
        processor["inputs"] = [names[topic] for topic in processor["inputs"]]
        processor["outputs"] = [names[topic] for topic in processor["outputs"]]
        params = processor["params"]
        params["routes"] = {acquirer: names[topic] for acquirer, topic in params["routes"].items()}
        params["unrouted"] = names[params["unrouted"]]
    app["state_dir"] = str(state_dir)
    return app


def test_the_demo_routes_every_payment_by_the_table_of_its_time(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app_yaml = tmp_path / "app.yaml"
    app_yaml.write_text(yaml.safe_dump(acquirers_app(topic_name, tmp_path / "state")))

    phases = demo(app_yaml, kafka_bootstrap, terminals=400, payments=600, seed=5, timeout_s=180)

    assert verdict(phases) == 0
    for phase in phases:
        assert sum(phase.routed.values()) == 600
        assert all(phase.routed.values()), f"an output topic got none of the payments: {phase.routed}"
    # A fresh store reads the whole table; the kept one, in the second run, only the 40 changed rows.
    assert [phase.table_records_read for phase in phases] == [400, 40]


def test_the_check_reports_a_payment_on_the_wrong_topic() -> None:
    router = Router.of(load_app(ROOT / APP_YAML))
    rng = random.Random(1)
    terminals = make_terminals(50, rng)
    payments = make_payments(20, terminals, 0.0, rng)
    expected = router.expected(payments, {t.terminal_id: t.acquirer_id for t in terminals})
    found = {topic: (topic, Counter(p for p, t in expected.items() if t == topic)) for topic in router.outputs}
    assert check(expected, found) == []

    moved = next(iter(expected))
    wrong = next(topic for topic in router.outputs if topic != expected[moved])
    found[expected[moved]][1].pop(moved)
    found[wrong][1][moved] += 1
    assert len(check(expected, found)) == 2  # missing from its topic, and found where it does not belong
