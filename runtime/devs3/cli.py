"""`python -m runtime dev-s3 start|stop|status`."""

from __future__ import annotations

import argparse
import sys

from runtime.devs3 import managed
from runtime.devs3.server import DevS3Error


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime dev-s3",
        description="Run a local S3-compatible object store (s3s-fs, built with cargo on first use) on 127.0.0.1 "
        "for development, and print the AWS_* variables that point clients and an app's `snapshots: {location: "
        "s3://bucket/prefix}` at it. Its data lives under RUNTIME_CACHE_DIR (default ~/.cache/kafka-actor-runtime).",
    )
    parser.add_argument(
        "action",
        choices=["start", "stop", "status"],
        help="start the server (or find it running), stop it, or print its variables (exit 1: not running)",
    )
    parser.add_argument("--port", type=int, default=None, help="start: port (default 9000 or the last one)")
    parser.add_argument("--bucket", action="append", default=[], help="start: create this bucket (repeatable)")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.action == "start":
            server, started = managed.start(args.port)
            for bucket in args.bucket:
                server.create_bucket(bucket)
            print(f"# object store {'started' if started else 'already running'} at {server.endpoint}")
            print(managed.exports(server))
        elif args.action == "stop":
            stopped = managed.stop()
            print(f"object store at {stopped.endpoint} stopped" if stopped else "no local object store is running")
        else:
            current = managed.running()
            if current is None:
                print("no local object store is running")
                return 1
            print(f"# object store running at {current.endpoint}")
            print(managed.exports(current))
    except DevS3Error as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
