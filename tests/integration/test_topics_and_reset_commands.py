"""`topics` and `reset` against a real broker: what they print matches the broker, and a reset moves the
app's offsets (refused while the app runs)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.config import parse_app
from runtime.worker.worker import Worker
from tests.conftest import TopicNamer
from tests.integration.test_state import counting_app, final_counts, run_until_caught_up, true_counts
from tests.support.commands import run_command
from tests.support.kafka_helpers import committed_offsets, create_topic, produce, read_topic
from tests.support.running import numbered, write_app

pytestmark = pytest.mark.anyio


async def test_topics_create_describe_and_list_the_apps_topics(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, sink, reference = topic_name("in"), topic_name("out"), topic_name("reference")
    app = counting_app(topic_name("app"), source, sink, 3, tmp_path / "state", "rocksdb")
    app["kafka"] = {"bootstrap_servers": kafka_bootstrap}
    app["topics"][source]["config"] = {"retention.ms": "86400000"}
    app["topics"][reference] = {"partitions": 1, "cleanup_policy": "compact"}
    app["errors"] = {"processing": "dead_letter"}
    path = write_app(tmp_path, app)
    changelog, dead_letters = f"{app['app_id']}-counts-changelog", f"{app['app_id']}-dead-letters"
    everything = sorted([source, sink, reference, changelog, dead_letters])

    created = run_command(kafka_bootstrap, "topics", "create", "--app", str(path))
    assert created.returncode == 0, created.stderr
    partitions = {source: 3, sink: 3, reference: 1, changelog: 3, dead_letters: 1}
    assert created.stdout.splitlines() == [
        f"created {topic} ({partitions[topic]} partition{'s' if partitions[topic] > 1 else ''})" for topic in everything
    ]
    again = run_command(kafka_bootstrap, "topics", "create", "--app", str(path))
    assert all(line.startswith("exists ") for line in again.stdout.splitlines()), again.stdout

    await produce(kafka_bootstrap, source, numbered(30))
    described = run_command(kafka_bootstrap, "topics", "describe", "--app", str(path), "--json")
    assert described.returncode == 0, described.stderr
    infos = {info["topic"]: info for info in json.loads(described.stdout)}
    assert sorted(infos) == everything
    assert {topic: info["partitions"] for topic, info in infos.items()} == partitions
    assert infos[source]["configs"] == {"cleanup.policy": "delete", "retention.ms": "86400000"}
    assert infos[changelog]["configs"] == {"cleanup.policy": "compact"}
    assert infos[reference]["configs"] == {"cleanup.policy": "compact"}
    raw = await read_topic(kafka_bootstrap, source)
    assert infos[source]["records"] == 30
    details = infos[source]["partition_details"]
    assert [detail["end_offset"] for detail in details] == [
        sum(1 for record in raw if record.partition == partition) for partition in range(3)
    ]
    assert all(detail["bytes"] > 0 for detail in details if detail["end_offset"] > 0)
    assert infos[source]["bytes"] == sum(detail["bytes"] for detail in details)
    assert all(detail["isr"] == detail["replicas"] == [detail["leader"]] for detail in details)

    text = run_command(kafka_bootstrap, "topics", "describe", source, topic_name("nowhere"))
    assert f"{source}: 3 partitions, replication factor 1, 30 records, " in text.stdout
    assert "  configs: cleanup.policy=delete, retention.ms=86400000" in text.stdout
    assert f"{topic_name('nowhere')}: does not exist" in text.stdout

    listed = run_command(kafka_bootstrap, "topics", "list").stdout.splitlines()
    assert set(everything) <= set(listed) and "__consumer_offsets" not in listed
    assert "__consumer_offsets" in run_command(kafka_bootstrap, "topics", "list", "--all").stdout.splitlines()


async def counted(topic_name: TopicNamer, tmp_path: Path, bootstrap: str) -> tuple[dict[str, Any], Path]:
    """A counting app, written to a YAML, that has processed 40 records once."""
    app = counting_app(topic_name("app"), topic_name("in"), topic_name("out"), 2, tmp_path / "state", "rocksdb")
    app["kafka"] = {"bootstrap_servers": bootstrap}
    path = write_app(tmp_path, app)
    await create_topic(bootstrap, topic_name("in"), 2)
    await produce(bootstrap, topic_name("in"), numbered(40))
    await run_until_caught_up(app, bootstrap)
    return app, path


async def until_members(bootstrap: str, path: Path, running: asyncio.Task[None]) -> str:
    """The refusal of a reset, once the running worker has joined its group."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not running.done():
        refused = await asyncio.to_thread(run_command, bootstrap, "reset", str(path), "--dry-run")
        if refused.returncode == 1:
            return refused.stderr
        await asyncio.sleep(0.5)
    raise AssertionError("the worker never showed up as a member of its group")


async def test_reset_is_refused_while_the_app_runs_and_moves_its_offsets_once_it_stopped(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, path = await counted(topic_name, tmp_path, kafka_bootstrap)
    source, sink, group = topic_name("in"), topic_name("out"), app["app_id"]
    ends = await committed_offsets(kafka_bootstrap, group)
    assert sum(ends.values()) == 40

    worker = Worker(parse_app(app), kafka_bootstrap)
    running = asyncio.create_task(worker.run())
    try:
        refusal = await until_members(kafka_bootstrap, path, running)
    finally:
        worker.stop()
        await running
    assert refusal.strip() == (
        f"error: consumer group {group} has 1 active member ({group}-consumer at 127.0.0.1): "
        "stop every worker of the app, then reset it"
    )

    dry = run_command(kafka_bootstrap, "reset", str(path), "--dry-run", "--delete-state")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"consumer group {group}: committed offsets to earliest",
        *(f"  {source}[{p}]  {ends[(source, p)]} -> 0" for p in range(2)),
        f"delete local state {tmp_path / 'state' / group}",
        "dry run: nothing was changed",
    ]
    assert dry.stderr.splitlines() == [
        "warning: --delete-state alone does not empty store counts: each is restored from its changelog at "
        "start; add --delete-changelogs to start from nothing"
    ]
    assert await committed_offsets(kafka_bootstrap, group) == ends
    assert (tmp_path / "state" / group).is_dir()

    kept = run_command(kafka_bootstrap, "reset", str(path))
    assert kept.returncode == 0, kept.stderr
    assert kept.stderr.splitlines() == [
        "warning: store counts keep what they hold: the records processed again add to it (a total counts them "
        "twice); add --delete-state --delete-changelogs to start from nothing"
    ]
    assert await committed_offsets(kafka_bootstrap, group) == {tp: 0 for tp in ends}
    await run_until_caught_up(app, kafka_bootstrap)
    assert len(await read_topic(kafka_bootstrap, sink)) == 80, "every input processed again"
    doubled = {key: 2 * count for key, count in true_counts(40).items()}
    assert await final_counts(kafka_bootstrap, sink) == doubled, "the store kept its counts: they went on"

    marker = time.time()
    await asyncio.sleep(0.05)
    await produce(kafka_bootstrap, source, numbered(10, start=40))
    await run_until_caught_up(app, kafka_bootstrap)
    at_marker = datetime.fromtimestamp(marker, UTC).isoformat()
    assert run_command(kafka_bootstrap, "reset", str(path), "--to", at_marker).returncode == 0
    assert await committed_offsets(kafka_bootstrap, group) == ends, "the first record after the time, per partition"
    to_latest = run_command(kafka_bootstrap, "reset", str(path), "--to", "latest")
    assert to_latest.returncode == 0 and to_latest.stderr == "", "nothing is processed again: no warning"
    assert sum((await committed_offsets(kafka_bootstrap, group)).values()) == 50


async def test_reset_with_its_state_and_changelogs_deleted_starts_the_app_from_scratch(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    app, path = await counted(topic_name, tmp_path, kafka_bootstrap)
    sink, group = topic_name("out"), app["app_id"]

    reset = run_command(kafka_bootstrap, "reset", str(path), "--delete-state", "--delete-changelogs")
    assert reset.returncode == 0, reset.stderr
    changelog = f"{group}-counts-changelog"
    assert f"delete changelog topic {changelog}" in reset.stdout and reset.stdout.endswith("done\n")
    assert not (tmp_path / "state" / group).exists()
    missing = run_command(kafka_bootstrap, "topics", "describe", changelog)
    assert missing.stdout.strip() == f"{changelog}: does not exist"

    await run_until_caught_up(app, kafka_bootstrap)
    assert await final_counts(kafka_bootstrap, sink) == true_counts(40), "counted again from nothing"


async def test_reset_takes_an_intermediate_topic_to_its_end_so_its_records_go_through_once_more_not_twice(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, middle, sink = topic_name("in"), topic_name("mid"), topic_name("out")
    app = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "topics": {topic: {"key_serde": "str"} for topic in (source, middle, sink)},
        "processors": [
            {"name": "first", "class": "tests.support.apps:Echo", "inputs": [source], "outputs": [middle],
             "params": {"output": middle}},
            {"name": "second", "class": "tests.support.apps:Echo", "inputs": [middle], "outputs": [sink],
             "params": {"output": sink}},
        ],
    }  # fmt: skip
    path = write_app(tmp_path, app)
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(20))

    async def twice() -> None:
        """A bounded run ends at the offsets its start found: the second reads what the first wrote."""
        for _ in range(2):
            await run_until_caught_up(app, kafka_bootstrap)

    await twice()
    assert len(await read_topic(kafka_bootstrap, sink)) == 20

    dry = run_command(kafka_bootstrap, "reset", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    plan = [" ".join(line.split()) for line in dry.stdout.splitlines()]  # names are padded to one width
    assert f"{source}[0] 20 -> 0" in plan
    assert f"{middle}[0] 20 -> 20 (intermediate: to its end)" in plan
    assert run_command(kafka_bootstrap, "reset", str(path)).returncode == 0

    await twice()
    assert len(await read_topic(kafka_bootstrap, middle)) == 40
    outputs = [msgpack.unpackb(record.value) for record in await read_topic(kafka_bootstrap, sink)]
    assert len(outputs) == 40, "each input once more through both processors, not the old middle records again"
    assert [output["src"] for output in outputs[20:]] == [[0, offset] for offset in range(20, 40)]
