"""The windowed examples' demos against a real broker: the per-minute payment totals (out of order, some
late) and the click sessions, each checked by its demo against the results computed in Python, and
here against the whole output topic."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from aiokafka import TopicPartition

import examples.minute_totals.run as minutes
import examples.sessions.run as clicks
from examples.disorder import Disorder
from examples.payments.generate import START_MS
from examples.payments.run import ROOT
from examples.window_results import read_windows
from tests.conftest import TopicNamer

PAYMENTS_DISORDER = Disorder(delayed_share=0.1, max_delay_ms=15_000, late_share=0.02, late_delay_ms=90_000)


def example_app(app_yaml: Path, topic_name: TopicNamer, state_dir: Path) -> dict[str, Any]:
    """An example's app YAML with this test's own topic names, app id and state dir."""
    app: dict[str, Any] = yaml.safe_load((ROOT / app_yaml).read_text())
    names = {topic: topic_name(topic) for topic in app["topics"]}
    app["app_id"] = topic_name("app")
    app["topics"] = {names[topic]: spec for topic, spec in app["topics"].items()}
    for processor in app["processors"]:
        processor["inputs"] = [names[topic] for topic in processor["inputs"]]
        processor["outputs"] = [names[topic] for topic in processor["outputs"]]
        params = processor["params"]
        params.update({field: names[params[field]] for field in ("output", "late_topic") if field in params})
    app["state_dir"] = str(state_dir)
    return app


def write(app: dict[str, Any], directory: Path) -> Path:
    path = directory / "app.yaml"
    path.write_text(yaml.safe_dump(app))
    return path


def whole_topic(bootstrap: str, app: dict[str, Any], decode_key: Any) -> dict[Any, list[Any]]:
    """Every result the app's output topic holds, from the examples' first minute on."""
    output = app["processors"][0]["params"]["output"]
    start = {TopicPartition(output, p): 0 for p in range(app["topics"][output]["partitions"])}
    return asyncio.run(read_windows(bootstrap, start, output, START_MS, decode_key))


def test_minute_totals_equal_the_payments_on_time_and_a_second_run_closes_the_first_ones_minutes(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app = example_app(minutes.APP_YAML, topic_name, tmp_path / "state")
    path = write(app, tmp_path)

    first = minutes.demo(path, kafka_bootstrap, 10_000, PAYMENTS_DISORDER, seed=7, timeout_s=120)

    assert first.problems == []
    expected = first.expected
    assert {minute: totals[0] for minute, totals in first.sent.items()} == expected.closed
    assert set(first.late_routed) == expected.late and first.late_counted == len(expected.late)
    # The input does what the example is for: out of order, some of it late, the last minutes left open.
    assert expected.out_of_order > 800 and 100 < len(expected.late) < 300
    assert len(expected.closed) > 1000 and expected.still_open

    second = minutes.demo(path, kafka_bootstrap, 5_000, PAYMENTS_DISORDER, seed=8, timeout_s=120)

    assert second.problems == []
    assert min(start for _, start, _ in second.sent) > max(start for _, start, _ in expected.still_open)
    # The second run's payments move every partition's stream time past the first run's open minutes.
    everything = {**expected.closed, **expected.still_open, **second.expected.closed}
    assert whole_topic(kafka_bootstrap, app, minutes.account_and_currency) == {
        minute: [total] for minute, total in everything.items()
    }


def test_sessions_are_those_the_clicks_were_made_in(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app = example_app(clicks.APP_YAML, topic_name, tmp_path / "state")
    disorder = Disorder(delayed_share=0.2, max_delay_ms=25_000)

    outcome = clicks.demo(write(app, tmp_path), kafka_bootstrap, 60, 4, disorder, seed=3, timeout_s=120)

    assert outcome.problems == []
    assert {span: counts[0] for span, counts in outcome.sent.items()} == outcome.closed
    assert outcome.late_counted == 0
    # 60 users, 4 sessions each: all closed but the last ones of the users whose clicks came last.
    assert len(outcome.closed) + len(outcome.still_open) == 240 and len(outcome.closed) > 200
    assert whole_topic(kafka_bootstrap, app, clicks.user) == outcome.sent
