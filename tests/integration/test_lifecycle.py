"""A processor's lifecycle against a real broker: async steps are awaited in order, and a step that
raises stops the worker with exit 1 and its cause, never a hang or a silent exit 0."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TopicNamer
from tests.integration.test_exactly_once import wait_exit
from tests.integration.test_flush_sink import final_error
from tests.support.kafka_helpers import create_topic, produce
from tests.support.running import numbered, spawn_worker, write_app

pytestmark = pytest.mark.anyio


def one_processor_app(app_id: str, source: str, bootstrap: str, name: str, cls: str, **params: Any) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {source: {"partitions": 1, "key_serde": "str"}},
        "processors": [
            {"name": name, "class": f"tests.support.lifecycle_apps:{cls}", "inputs": [source], "params": params}
        ],
        "commit_interval_ms": 50,
    }


async def test_async_init_and_close_are_awaited_and_close_follows_the_last_flush(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source = topic_name("in")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(20))
    journal = tmp_path / "journal"
    app = one_processor_app(topic_name("app"), source, kafka_bootstrap, "journal", "Journal", journal=str(journal))
    worker = spawn_worker(write_app(tmp_path, app), "--until-caught-up", log=tmp_path / "worker.log")
    assert await wait_exit(worker, 30) == 0

    events = journal.read_text().splitlines()
    assert events[0] == "init", events[:3]
    assert [event for event in events if event.startswith("process ")] == [f"process {n}" for n in range(20)]
    flushed = [int(n) for event in events if event.startswith("flush ") for n in event.split()[1:]]
    assert flushed == list(range(20)), "a record was not flushed, or flushed twice"
    assert events[-2].startswith("flush ") and events[-1] == "close", events[-3:]


# A processor that cannot start or close stops the worker under every policy; one whose flush or
# punctuation fails stops it under `fail` (a flush failing under `skip`: test_flush_sink.py).
POLICIES_THAT_STOP = {
    "constructor": ["fail", "skip", "dead_letter"],
    "init": ["fail", "skip", "dead_letter"],
    "close": ["fail", "skip", "dead_letter"],
    "flush": ["fail"],
    "punctuation": ["fail"],
}


@pytest.mark.parametrize("step", list(POLICIES_THAT_STOP))
async def test_a_raising_step_exits_1_with_its_cause(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path, step: str
) -> None:
    policies = POLICIES_THAT_STOP[step]
    source = topic_name("in")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(5))
    # Only close needs the worker to stop by itself; the others must stop it.
    args = ["--until-caught-up"] if step == "close" else []
    workers = {}
    for policy in policies:  # one worker per policy, side by side
        app = one_processor_app(topic_name(f"app-{policy}"), source, kafka_bootstrap, "fragile",
                                f"BreaksIn{step.capitalize()}")  # fmt: skip
        app["errors"] = {"deserialization": policy, "processing": policy}
        path = write_app(tmp_path, app, f"{policy}.yaml")
        workers[policy] = spawn_worker(path, *args, log=tmp_path / f"{policy}.log")
    codes = await asyncio.gather(*(wait_exit(worker, 30) for worker in workers.values()))
    assert dict(zip(workers, codes, strict=True)) == dict.fromkeys(policies, 1)

    for policy in policies:
        log = (tmp_path / f"{policy}.log").read_text()
        error = final_error(tmp_path / f"{policy}.log")
        assert "processor 'fragile'" in error and f"RuntimeError: {step} broke on purpose" in error, error
        logged = [line for line in log.splitlines() if " ERROR " in line and "processor 'fragile'" in line]
        assert logged, "the failure was not logged as an error"
        assert f"RuntimeError: {step} broke on purpose" in log.split(logged[0], 1)[1], "its cause was not logged"
