"""Store snapshots both ways on the payments app: `python -m examples.payments.snapshot_demo`.

1. Bootstrap: the generator writes the accounts' opening totals as Parquet, Spark's bootstrap job
   turns them into a snapshot of the `account-totals` store, and the app starts from it: each
   account's totals are its opening totals plus its valid payments.
2. Snapshot: while the app runs, Spark's snapshot job snapshots its store from the changelog; more
   payments follow; the app is stopped, its state deleted, and it restarts from the snapshot,
   replaying only the changelog after it. For comparison it restarts once more without that snapshot
   (the bootstrap snapshot plus the whole changelog): same store, in more time.

It uses topics and an app id of its own and a fresh `--workdir`, so the example's state is left alone.
Needs the `spark` extra (PySpark, Java 17).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import msgpack
import yaml

from examples.broker import kafka
from examples.payments.generate import make_payments, opening_totals, produce_payments
from examples.payments.run import APP_YAML, ROOT, Totals, added_totals, ensure_topics, unread
from runtime.config import AppConfig, load_app
from stores.rocksdb import RocksDBBackend

STORE = "account-totals"
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
RESTORE_STEP = re.compile(rf"\b{STORE} partition \d+")  # the restore's log lines of the store's partitions


def demo_app(workdir: Path, suffix: str) -> Path:
    """The example's YAML with its own app id and topics, state in `workdir`, and a snapshot location."""
    app: dict[str, Any] = yaml.safe_load((ROOT / APP_YAML).read_text())
    renamed = {name: f"{name}-{suffix}" for name in app["topics"]}
    app["app_id"] = f"payments-snapshot-demo-{suffix}"
    app["topics"] = {renamed[name]: topic for name, topic in app["topics"].items()}
    for processor in app["processors"]:
        processor["inputs"] = [renamed[name] for name in processor["inputs"]]
        processor["outputs"] = [renamed[name] for name in processor["outputs"]]
        params = processor["params"]
        for key in params:
            if key.endswith("_topic"):
                params[key] = renamed[params[key]]
    app["state_dir"] = str(workdir / "state")
    app["snapshots"] = {"location": str(workdir / "snapshots")}
    path = workdir / "app.yaml"
    path.write_text(yaml.safe_dump(app, sort_keys=False))
    return path


def run(command: list[str], bootstrap: str, **options: Any) -> subprocess.CompletedProcess[bytes]:
    print(f"$ {' '.join(['python', *command[1:]])}", flush=True)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, check=True, **options)


def spark_job(job: str, arguments: list[str], config: AppConfig, partitions: int, out: Path, bootstrap: str) -> None:
    """Runs a Spark job as a user would; Spark's own log goes to a file next to the snapshot."""
    spec = next(p.stores[STORE] for p in config.processors if STORE in p.stores)
    command = [sys.executable, "-m", "stores.spark", job, *arguments, f"--app={config.app_id}", f"--store={STORE}",
               f"--partitions={partitions}", f"--key-serde={spec.key_serde}", f"--value-serde={spec.value_serde}",
               f"--out={out}", "--master=local[2]"]  # fmt: skip
    with (out.parent / f"{out.name}.log").open("wb") as log:
        run(command, bootstrap, stderr=log)


def store_rows(config: AppConfig, partitions: int) -> dict[str, dict[str, Any]]:
    """Every account's stored state, read from the store's files (the app is not running)."""
    rows: dict[str, dict[str, Any]] = {}
    for partition in range(partitions):
        backend = RocksDBBackend(config.state_dir / config.app_id / STORE / str(partition))
        try:
            rows.update((key.decode(), msgpack.unpackb(value)) for key, value in backend.items())
        finally:
            backend.close()
    return rows


def expected_totals(
    opening: Iterable[tuple[str, int, dict[str, int], int]], *added: Mapping[str, Totals]
) -> dict[str, Totals]:
    expected: dict[str, Totals] = {
        account: {"count": count, "totals": dict(totals)} for account, count, totals, _ in opening
    }
    for batch in added:
        for account, more in batch.items():
            entry = expected.setdefault(account, {"count": 0, "totals": {}})
            entry["count"] += more["count"]
            for currency, minor in more["totals"].items():
                entry["totals"][currency] = entry["totals"].get(currency, 0) + minor
    return expected


def wait_until_drained(bootstrap: str, config: AppConfig, partitions: dict[str, int], timeout_s: float) -> None:
    inputs = {topic: partitions[topic] for topic in config.input_topics()}
    deadline = time.monotonic() + timeout_s
    while any(asyncio.run(unread(bootstrap, config.app_id, inputs)).values()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the app did not read its inputs within {timeout_s:.0f} s")
        time.sleep(1)


def restart_and_time(app_yaml: Path, config: AppConfig, bootstrap: str, log: Path) -> float:
    """Delete the app's state, run it until caught up; the seconds its restore took, from its log."""
    shutil.rmtree(config.state_dir / config.app_id)
    with log.open("wb") as output:
        run([sys.executable, "-m", "runtime", str(app_yaml), "--until-caught-up"], bootstrap, stderr=output)
    times = []
    for line in log.read_text().splitlines():
        stamp = LOG_TIME.match(line)
        if stamp and RESTORE_STEP.search(line):
            times.append(datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f"))
            if "ingested snapshot" in line or "restored store" in line:  # each partition's two steps, done
                print(f"  {line[stamp.end() :]}")
    return (max(times) - min(times)).total_seconds()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.payments.snapshot_demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--count", type=int, default=200_000, help="payments before the snapshot (default 200000)")
    parser.add_argument("--after", type=int, default=4_000, help="payments after it (default 4000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="payments-snapshots-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with kafka() as bootstrap:
        return demo(bootstrap, workdir, args.count, args.after, args.seed, args.timeout)


def demo(bootstrap: str, workdir: Path, count: int, after: int, seed: int, timeout_s: float) -> int:
    app_yaml = demo_app(workdir, uuid.uuid4().hex[:8])
    config = load_app(app_yaml)
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    store_partitions = partitions[config.processors[1].inputs[0]]
    snapshots = workdir / "snapshots" / STORE
    snapshots.mkdir(parents=True)
    print(f"working in {workdir}\n\n1. bootstrap the store from Parquet", flush=True)
    parquet = workdir / "opening-totals.parquet"
    with (workdir / "opening-totals.log").open("wb") as log:  # Spark's log
        run([sys.executable, "-m", "examples.payments.generate", f"--count={count}", f"--seed={seed}",
             f"--opening-totals={parquet}"], bootstrap, stderr=log)  # fmt: skip
    spark_job("bootstrap", ["--source=parquet", f"--path={parquet}", "--key-column=account", "--value-column=count",
                            "--value-column=totals", "--value-column=offset"], config, store_partitions,
              snapshots / "1-bootstrap", bootstrap)  # fmt: skip

    print("\n2. run the app from the bootstrapped store, snapshot it from its changelog while it runs", flush=True)
    app_log = workdir / "app.log"
    with app_log.open("wb") as output:
        command = [sys.executable, "-m", "runtime", str(app_yaml)]
        print(f"$ {' '.join(['python', *command[1:]])} &  (log: {app_log})", flush=True)
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
        app = subprocess.Popen(command, cwd=ROOT, env=env, stderr=output)
    try:
        first = list(make_payments(count, seed=seed))
        asyncio.run(produce_payments(bootstrap, config.processors[0].inputs[0], iter(first)))
        print(f"produced {count:,} payments; waiting for the app to process them ...", flush=True)
        wait_until_drained(bootstrap, config, partitions, timeout_s)
        spark_job("snapshot", [f"--bootstrap-servers={bootstrap}", f"--topic={config.changelog_topic(STORE)}"],
                  config, store_partitions, snapshots / "2-changelog", bootstrap)  # fmt: skip
        second = list(make_payments(after, seed=seed + 1))
        asyncio.run(produce_payments(bootstrap, config.processors[0].inputs[0], iter(second)))
        print(f"produced {after:,} more payments after the snapshot", flush=True)
        wait_until_drained(bootstrap, config, partitions, timeout_s)
    finally:
        app.send_signal(signal.SIGINT)
        app.wait(timeout=60)
    before = store_rows(config, store_partitions)
    expected = expected_totals(opening_totals(count, seed), added_totals(first), added_totals(second))
    found = {account: {"count": row["count"], "totals": row["totals"]} for account, row in before.items()}
    if found != expected:
        wrong = sorted(a for a in expected.keys() | found.keys() if found.get(a) != expected.get(a))
        print(f"FAILED: {len(wrong):,} accounts differ from opening totals plus payments, e.g. {wrong[0]}: "
              f"{found.get(wrong[0])} != {expected.get(wrong[0])}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"the store holds {len(before):,} accounts: each one's opening totals plus its valid payments")

    print("\n3. delete the app's state and restart: from the changelog snapshot plus the changelog tail", flush=True)
    fast = restart_and_time(app_yaml, config, bootstrap, workdir / "restart-snapshot.log")
    from_snapshot = store_rows(config, store_partitions)
    print("\n   and without the changelog snapshot: the bootstrap snapshot plus the whole changelog", flush=True)
    shutil.move(snapshots / "2-changelog", workdir / "2-changelog")
    slow = restart_and_time(app_yaml, config, bootstrap, workdir / "restart-changelog.log")
    replayed = store_rows(config, store_partitions)
    if not from_snapshot == replayed == before:
        print("FAILED: a restored store differs from the store before its state was deleted", file=sys.stderr)
        return 1
    print(f"\nOK: both restores rebuilt the same {len(before):,} accounts; ready in {fast:.2f} s from the snapshot, "
          f"{slow:.2f} s replaying the changelog ({slow / fast if fast else float('inf'):.1f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
