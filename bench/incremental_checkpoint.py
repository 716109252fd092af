"""Incremental checkpoints in a bucket of the local object store (runtime/devs3/): (a) the bytes a store's
first checkpoint uploads against one taken after 1% of its keys changed; (b) a task's warm start from
that checkpoint in the bucket against restoring the store from its changelog, with no state left.

`python -m bench.incremental_checkpoint [--keys 1000000] [--runs 3] [--partitions 6] [--bootstrap HOST:PORT]
[--bytes-only]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import msgpack

from bench.app import REPO_ROOT, AppSpec
from bench.broker import create_topics, kafka, topic_size
from bench.data import fill_topic
from bench.restore import build_changelog, changelog_topic, restart_without_state
from bench.snapshot_restore import ReadyRun, describe, parse_ready
from bench.stateful import STORE, count_store
from bench.stats import median, run_directory, write_result
from bench.throughput import fresh_output
from runtime.devs3.server import LocalS3, throwaway
from stores.checkpoint import assemble, write_partition_checkpoint
from stores.object_storage import ObjectStorage
from stores.object_url import ObjectUrl
from stores.rocksdb import RocksDBBackend

CHANGED = 0.01
SPARED = re.compile(r"(\d+) changelog records not replayed")
BATCH = 100_000


@dataclass(frozen=True)
class Upload:
    first_bytes: int
    after_change_bytes: int

    @property
    def ratio(self) -> float:
        return self.first_bytes / self.after_change_bytes if self.after_change_bytes else float("inf")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.incremental_checkpoint", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys in the store")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--bytes-only", action="store_true", help="only (a): no broker, no app")
    return parser.parse_args()


def storage_of(server: LocalS3, prefix: str) -> ObjectStorage:
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    return ObjectStorage(ObjectUrl.parse(f"s3://{bucket}/{prefix}"), server.client())


def checkpoint(store: RocksDBBackend, storage: ObjectStorage, scratch: Path, name: str, partitions: int = 1) -> int:
    """One partition's checkpoint of `store` (as a worker takes it), assembled; the bytes it uploaded."""
    before = storage.uploaded_bytes
    copy = scratch / f"checkpoint-{name}"
    store.checkpoint(copy)
    key = f"{STORE}/{name}"
    write_partition_checkpoint(copy, storage, key, 0, {"input": store.changelog_offset() or 0})
    assemble(storage, key, app="bench", store=STORE, partitions=partitions, key_serde="msgpack",
             value_serde="msgpack", changelog_topic="bench-changelog", kind="key_value")  # fmt: skip
    return storage.uploaded_bytes - before


def measure_upload(server: LocalS3, keys: int, scratch: Path, seed: int) -> Upload:
    """A store of `keys` counts written in batches, as a task's commits write them; checkpointed; 1% of its
    keys counted again; checkpointed again."""
    store = RocksDBBackend(scratch / "store")
    packer = msgpack.Packer()
    try:
        offset = 0
        for start in range(0, keys, BATCH):
            indexes = range(start, min(keys, start + BATCH))
            rows = [(packer.pack(f"key-{index:09d}"), packer.pack(1)) for index in indexes]
            offset += len(rows)
            store.write(rows, offset)
        storage = storage_of(server, "upload")
        first = checkpoint(store, storage, scratch, "20261129T100000Z")
        chosen = random.Random(seed).sample(range(keys), int(keys * CHANGED))
        changed = [(packer.pack(f"key-{index:09d}"), packer.pack(2)) for index in sorted(chosen)]
        store.write(changed, offset + len(changed))
        after = checkpoint(store, storage, scratch, "20261129T110000Z")
    finally:
        store.close()
        shutil.rmtree(scratch / "store", ignore_errors=True)
    return Upload(first, after)


def checkpoint_app_stores(spec: AppSpec, state_dir: Path, storage: ObjectStorage) -> int:
    """The app's stores, as they are on disk, checkpointed into the bucket as its workers would; the bytes."""
    name = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    key = f"{STORE}/{name}"
    before = storage.uploaded_bytes
    for partition in range(spec.partitions):
        backend = RocksDBBackend(state_dir / spec.app_id / STORE / str(partition))
        try:
            copy = state_dir / f".bench-checkpoint-{partition}"
            backend.checkpoint(copy)
        finally:
            backend.close()
        write_partition_checkpoint(copy, storage, key, partition, {spec.input_topic: 0})
    manifest = assemble(storage, key, app=spec.app_id, store=STORE, partitions=spec.partitions,
                        key_serde="msgpack", value_serde="msgpack", changelog_topic=changelog_topic(spec),
                        kind="key_value")  # fmt: skip
    if manifest is None:
        raise RuntimeError("the checkpoint did not complete")
    return storage.uploaded_bytes - before


def main() -> None:
    args = parse_args()
    workdir = run_directory("incremental-checkpoint")
    uploads: list[Upload] = []
    runs: dict[str, list[ReadyRun]] = {"changelog": [], "checkpoint": []}
    spared: list[int] = []
    with throwaway() as server:
        for number in range(1, args.runs + 1):
            upload = measure_upload(server, args.keys, workdir, seed=number)
            uploads.append(upload)
            print(
                f"run {number}/{args.runs} upload: first checkpoint {upload.first_bytes:,} bytes, after {CHANGED:.0%} "
                f"of {args.keys:,} keys changed {upload.after_change_bytes:,} bytes ({upload.ratio:.1f}x less)"
            )
        if not args.bytes_only:
            warm_start(args, workdir, server, runs, spared)
    first = median([u.first_bytes for u in uploads])
    after = median([u.after_change_bytes for u in uploads])
    print(
        f"median of {args.runs}, {args.keys:,} keys: first checkpoint {first:,.0f} bytes, after a {CHANGED:.0%} "
        f"change {after:,.0f} bytes: {after / first:.1%} of the first ({first / after:.1f}x less)"
    )
    results: dict[str, object] = {
        "keys": args.keys,
        "uploads": [asdict(u) for u in uploads],
        "median_upload": {"first_bytes": first, "after_change_bytes": after, "ratio": first / after},
    }
    if runs["checkpoint"]:
        ready = {mode: median([r.ready_seconds for r in measured]) for mode, measured in runs.items()}
        ratio = ready["changelog"] / ready["checkpoint"] if ready["checkpoint"] else float("inf")
        print(
            f"median of {args.runs}, {args.keys:,} keys in {args.partitions} partitions: ready after changelog replay "
            f"{ready['changelog']:.2f} s, after the warm start from the bucket {ready['checkpoint']:.2f} s: "
            f"{ratio:.1f}x faster; {median(spared):,.0f} changelog records not replayed"
        )
        results |= {
            "partitions": args.partitions,
            "runs": {mode: [asdict(r) for r in measured] for mode, measured in runs.items()},
            "median_ready": {"seconds": ready, "ratio": ratio},
        }
    path = write_result(workdir, "incremental_checkpoint", results)
    print(f"result: {path.relative_to(REPO_ROOT)}")


def warm_start(
    args: argparse.Namespace,
    workdir: Path,
    server: LocalS3,
    runs: dict[str, list[ReadyRun]],
    spared: list[int],
) -> None:
    state_dir = workdir / "state"
    suffix = uuid.uuid4().hex[:8]
    input_topic = f"bench-incremental-in-{suffix}"
    os.environ.update(server.environment())  # the workers reach the bucket as any AWS client does
    storage = storage_of(server, "app")
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {args.keys:,} records of distinct keys ...")
        asyncio.run(fill_topic(bootstrap, input_topic, args.keys, args.partitions, args.keys))
        full = AppSpec(
            app_id=f"bench-incremental-{suffix}",
            bootstrap=bootstrap,
            input_topic=input_topic,
            output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)),
            partitions=args.partitions,
            processor_class="bench.processors:CountPerKey",
            processor_name="count",
            stores=count_store("rocksdb"),
            extra={"state_dir": str(state_dir)},
        )
        from_bucket = replace(full, extra={**full.extra, "snapshots": {"location": str(storage.url)}})
        build_changelog(full, workdir, args.keys)
        uploaded = checkpoint_app_stores(full, state_dir, storage)
        changelog = asyncio.run(topic_size(bootstrap, changelog_topic(full)))
        print(f"checkpoint in {storage.url}: {uploaded:,} bytes; changelog {changelog:,} records")
        for number in range(1, args.runs + 1):
            for mode, spec in (("changelog", full), ("checkpoint", from_bucket)):
                process, started_at = restart_without_state(spec, workdir, state_dir, changelog, False)
                run = parse_ready(process, started_at)
                runs[mode].append(run)
                if mode == "checkpoint":
                    spared.append(sum(int(found) for found in SPARED.findall(process.log_path.read_text())))
                print(f"run {number}/{args.runs} {mode:>10}: {describe(run)}")
    shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
