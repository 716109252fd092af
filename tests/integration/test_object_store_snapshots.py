"""Checkpoints in an S3-compatible object store, a real one on 127.0.0.1 (runtime/devs3/): the runtime takes
them into `s3://bucket/prefix` with the environment's endpoint and credentials, a worker whose local state is
gone restores from the newest, and an object whose bytes are not those its manifest lists is refused by name."""

from __future__ import annotations

import asyncio
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.devs3.server import LocalS3
from stores.snapshot import parse_manifest
from tests.conftest import TopicNamer
from tests.integration.test_rewind import PARTITIONS, checkpointing_app, latest, runtime
from tests.integration.test_state import true_counts
from tests.support.kafka_helpers import produce
from tests.support.running import numbered, write_app


def test_a_state_directory_wiped_is_restored_from_a_checkpoint_in_a_bucket_and_a_corrupt_object_is_refused(
    kafka_bootstrap: str,
    topic_name: TopicNamer,
    tmp_path: Path,
    object_store: LocalS3,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in object_store.environment().items():
        monkeypatch.setenv(name, value)
    bucket = f"checkpoints-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(bucket)
    app, source, sink = checkpointing_app(kafka_bootstrap, topic_name, tmp_path, every="1s")
    app["snapshots"]["location"] = f"s3://{bucket}/bank"
    path = write_app(tmp_path, app)
    asyncio.run(produce(kafka_bootstrap, source, numbered(300)))
    taken = runtime(kafka_bootstrap, str(path), "--until-caught-up")
    assert taken.returncode == 0, taken.stderr
    assert object_store.secret_key not in taken.stderr + taken.stdout
    client = object_store.client()
    keys = [entry["Key"] for entry in client.list_objects_v2(Bucket=bucket, Prefix="bank/counts/")["Contents"]]
    complete = sorted(key.rsplit("/", 1)[0] for key in keys if key.endswith("/manifest.json"))
    assert complete, f"no complete checkpoint in the bucket: {keys}"
    newest = complete[-1]
    manifest = parse_manifest(client.get_object(Bucket=bucket, Key=f"{newest}/manifest.json")["Body"].read(), newest)
    files = [file for files in manifest.files.values() for file in files]
    assert {f"bank/counts/{file.key}" for file in files} <= set(keys)
    assert all(file.key.startswith("_shared/partition-") for file in files)
    # An object cut short (as a copy that stopped half-way leaves it), the largest the checkpoint names: the
    # restore refuses it, naming it. Every file of a partition's database is checked, whichever it is.
    victim = f"bank/counts/{max(files, key=lambda file: file.size).key}"
    good = object_bytes(client, bucket, victim)
    client.put_object(Bucket=bucket, Key=victim, Body=good[: len(good) // 2])
    shutil.rmtree(tmp_path / "state")
    refused = runtime(kafka_bootstrap, str(path), "--until-caught-up")
    assert refused.returncode != 0
    assert f"s3://{bucket}/{victim} is corrupt or partly written" in refused.stderr, refused.stderr[-3000:]

    # Whole again: the wiped state is the checkpoint's plus the changelog's tail, and counts on exactly.
    client.put_object(Bucket=bucket, Key=victim, Body=good)
    shutil.rmtree(tmp_path / "state", ignore_errors=True)
    asyncio.run(produce(kafka_bootstrap, source, numbered(90, start=300)))
    restored = runtime(kafka_bootstrap, str(path), "--until-caught-up")
    assert restored.returncode == 0, restored.stderr
    assert f"ingesting snapshot s3://{bucket}/{newest} " in restored.stderr, restored.stderr[-3000:]
    spared = [int(found) for found in re.findall(r"(\d+) changelog records not replayed", restored.stderr)]
    assert len(spared) == PARTITIONS and sum(spared) == sum(manifest.changelog_offsets.values())
    counts = {key: update["count"] for key, update in latest(kafka_bootstrap, sink, bytes.decode).items()}
    assert counts == true_counts(390)
    assert latest(kafka_bootstrap, f"{app['app_id']}-counts-changelog", msgpack.unpackb) == true_counts(390)


def object_bytes(client: Any, bucket: str, key: str) -> bytes:
    body: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body
