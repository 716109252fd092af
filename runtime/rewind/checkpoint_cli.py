"""`python -m runtime checkpoint app.yaml`: the running app checkpoints its stores now; `--list` shows the
checkpoints there are."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from runtime.commands.cluster import CommandFailed
from runtime.commands.running import command_parser, run
from runtime.config import AppConfig, load_app
from runtime.guarantees.store_checkpoints import request_key
from runtime.rewind.catalog import checkpointed_stores, checkpoints

EPILOG = """\
A checkpoint holds, for every store in RocksDB with a changelog and a snapshot location (the YAML's
`snapshots`), each partition's state as a commit left it and the input offsets that commit covered.
The running workers take it at their next commits: this command asks them to (a file in the snapshot
location, which they look for every second) and waits until every partition of every store is in it.
`snapshots: {every: 1h}` has them take one every hour besides. `python -m runtime rewind` goes back to one.

examples:
  python -m runtime checkpoint app.yaml
  python -m runtime checkpoint app.yaml --list
"""


def request(app: AppConfig, timeout_s: float) -> int:
    stores = checkpointed_stores(app)
    if not stores:
        raise CommandFailed(
            "no store takes checkpoints: give the app (or a store) `snapshots: {location: DIR or s3://bucket/prefix}`, "
            "and stores in RocksDB with a changelog"
        )
    name = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    storages = {store.snapshots.location: store.snapshots.storage() for store in stores}.values()
    for storage in storages:
        storage.write_bytes(request_key(name), f"requested by python -m runtime checkpoint at {name}\n".encode())
    deadline = time.monotonic() + timeout_s
    try:
        while not any(found.name == name for found in checkpoints(app)):
            if time.monotonic() > deadline:
                raise CommandFailed(
                    f"checkpoint {name} was not complete after {timeout_s:.0f} s: is every worker "
                    "of the app running? (the request stays until this command ends)"
                )
            time.sleep(0.2)
    finally:
        for storage in storages:
            storage.delete(request_key(name))
    print(name)
    return 0


def listing(app: AppConfig) -> int:
    for found in checkpoints(app):
        rows = sum(sum(manifest.row_counts.values()) for manifest in found.manifests.values())
        print(
            f"{found.name}  {len(found.manifests)} store{'s' if len(found.manifests) > 1 else ''}, {rows:,} rows",
            file=sys.stdout,
        )
    return 0


def parser() -> argparse.ArgumentParser:
    parser = command_parser("checkpoint", "Checkpoint the running app's stores now, or list its checkpoints.", EPILOG)
    parser.add_argument("app", type=Path, help="the app's YAML file")
    parser.add_argument("--list", action="store_true", help="list the complete checkpoints, oldest first")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the workers (default 300)")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        app = load_app(args.app)
        return listing(app) if args.list else request(app, args.timeout)

    return run(args.app, body)
