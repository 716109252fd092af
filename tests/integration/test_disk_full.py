"""A state directory whose disk fills up: one clear error and exit 1; exact once the space is back."""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from tests.conftest import TopicNamer
from tests.support.kafka_helpers import create_topic, produce, read_topic
from tests.support.running import numbered, spawn_worker, write_app

pytestmark = pytest.mark.anyio

RECORDS = 200
VALUE_BYTES = 64 * 1024  # 200 of them (12.5 MiB) cannot fit on the small disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a real filesystem that runs out of space (mounting needs root)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        check=False,
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def grow(mount_point: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=64m", str(mount_point)], check=True)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_a_full_disk_stops_the_app_with_one_clear_error(
    kafka_bootstrap: str, topic_name: TopicNamer, small_disk: Path, tmp_path: Path, guarantee: str
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    await create_topic(kafka_bootstrap, source, 1)
    await produce(kafka_bootstrap, source, numbered(RECORDS))
    app = {
        "app_id": topic_name("app"),
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "topics": {source: {"partitions": 1, "key_serde": "str"}, sink: {"partitions": 1, "key_serde": "str"}},
        "processors": [{"name": "hoard", "class": "tests.support.apps:Hoard", "inputs": [source],
                        "outputs": [sink], "params": {"output": sink, "value_bytes": VALUE_BYTES},
                        "stores": {"hoard": {"backend": "rocksdb", "value_serde": "bytes"}}}],
        "guarantee": guarantee,
        "state_dir": str(small_disk),
    }  # fmt: skip
    path = write_app(tmp_path, app)

    full = spawn_worker(path, "--until-caught-up", log=tmp_path / "full.log")
    assert full.wait(timeout=120) == 1
    log = (tmp_path / "full.log").read_text()
    assert "/hoard/0 cannot be written: IO error: No space left on device" in log, log  # the store and the cause
    assert "Traceback" not in log, log

    await asyncio.to_thread(grow, small_disk)  # the space is back
    again = spawn_worker(path, "--until-caught-up", log=tmp_path / "again.log")
    assert again.wait(timeout=120) == 0, (tmp_path / "again.log").read_text()
    outputs = Counter(msgpack.unpackb(r.value)["n"] for r in await read_topic(kafka_bootstrap, sink))
    if guarantee == "exactly_once":
        assert outputs == Counter(range(RECORDS)), "an output is missing or doubled"
    else:  # the offsets of the failed commit were not committed: those records are processed again
        assert set(outputs) == set(range(RECORDS)), "an output is missing"
