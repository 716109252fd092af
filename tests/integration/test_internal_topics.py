"""`internal_topics` against a real (single) broker: the topics the runtime names after the app are created
with the broker's default replication and the configs asked; replicas the cluster cannot give stop the app
with one line naming the topic and the setting; an existing topic with fewer replicas is warned about."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from runtime.config import parse_app
from runtime.kafka.topics import InternalTopic, describe_shapes, ensure_internal_topics
from tests.conftest import TopicNamer
from tests.integration.test_state import counting_app, final_counts, run_until_caught_up, true_counts
from tests.support.commands import run_command
from tests.support.kafka_helpers import produce
from tests.support.running import numbered, write_app

pytestmark = pytest.mark.anyio


def app_with_internal_topics(topic_name: TopicNamer, tmp_path: Path, internal: dict[str, Any]) -> dict[str, Any]:
    """A counting app with a changelog and a dead-letter topic, whose internal topics `internal` describes."""
    app = counting_app(topic_name("app"), topic_name("in"), topic_name("out"), 2, tmp_path / "state", "rocksdb")
    app["errors"] = {"processing": "dead_letter"}
    app["internal_topics"] = internal
    return app


async def test_by_default_internal_topics_get_the_brokers_replication_and_the_configs_asked(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app = app_with_internal_topics(topic_name, tmp_path, {"configs": {"min.insync.replicas": "1"}})
    created = run_command(kafka_bootstrap, "topics", "create", "--app", str(write_app(tmp_path, app)))
    assert created.returncode == 0, created.stderr
    changelog, dead_letters = f"{app['app_id']}-counts-changelog", f"{app['app_id']}-dead-letters"
    positions = topic_name("positions")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        settings = parse_app(app).internal_topics
        assert await ensure_internal_topics(admin, settings, [InternalTopic(positions, compacted=True)]) == {
            positions: 1
        }
        shapes = await describe_shapes(admin, [changelog, dead_letters, positions])
    finally:
        await admin.close()
    assert {topic: shape.replicas for topic, shape in shapes.items()} == dict.fromkeys(shapes, 1)
    assert sorted(shapes) == sorted([changelog, dead_letters, positions])
    described = run_command(kafka_bootstrap, "topics", "describe", changelog, dead_letters, positions)
    assert described.returncode == 0, described.stderr
    configs = [line.strip() for line in described.stdout.splitlines() if line.strip().startswith("configs:")]
    assert configs == [
        "configs: cleanup.policy=compact, min.insync.replicas=1",  # the changelog
        "configs: cleanup.policy=delete, min.insync.replicas=1",  # dead letters
        "configs: cleanup.policy=compact, min.insync.replicas=1",  # the positions
    ]


async def test_more_replicas_than_the_cluster_has_stop_the_app_with_one_line_naming_the_setting(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app = app_with_internal_topics(topic_name, tmp_path, {"replication_factor": 2})
    path = write_app(tmp_path, app)
    result = run_command(kafka_bootstrap, str(path))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert re.search(
        rf"^  internal_topics\.replication_factor: topic {app['app_id']}-dead-letters cannot be created with 2 "
        r"replicas: .*only 1 broker",
        result.stderr,
        re.MULTILINE,
    ), result.stderr


async def test_an_existing_internal_topic_with_fewer_replicas_is_warned_about_and_the_app_goes_on(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = app_with_internal_topics(topic_name, tmp_path, {"replication_factor": 1})
    created = run_command(kafka_bootstrap, "topics", "create", "--app", str(write_app(tmp_path, first)))
    assert created.returncode == 0, created.stderr
    source = next(iter(first["topics"]))
    await produce(kafka_bootstrap, source, numbered(20))
    app = {**first, "internal_topics": {"replication_factor": 2}}
    with caplog.at_level(logging.WARNING, logger="runtime.kafka.topics"):
        await run_until_caught_up(app, kafka_bootstrap)
    warned = sorted(record.getMessage() for record in caplog.records if "replica" in record.getMessage())
    assert warned == [
        f"topic {app['app_id']}-{name} has 1 replica, fewer than the 2 internal_topics.replication_factor asks: "
        "it is left as it is (kafka-reassign-partitions adds replicas)"
        for name in ("counts-changelog", "dead-letters")
    ]
    sink = list(first["topics"])[1]
    assert await final_counts(kafka_bootstrap, sink) == true_counts(20)
