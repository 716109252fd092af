"""`python -m runtime dev-postgres start|stop|status`."""

from __future__ import annotations

import argparse
import sys

from runtime.devpostgres import managed
from runtime.devpostgres.server import DevPostgresError


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime dev-postgres",
        description="Run a local PostgreSQL (Debian's package, a throwaway cluster) on 127.0.0.1 for development.",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--port", type=int, default=None, help="port (default 5432, or a free one)")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            server, started = managed.start(args.port)
            print(f"PostgreSQL {'started' if started else 'already running'}: DATABASE_URL={server.url}")
        elif args.action == "stop":
            stopped = managed.stop()
            print(f"PostgreSQL at {stopped.url} stopped" if stopped else "no local PostgreSQL is running")
        else:
            current = managed.running()
            if current is None:
                print("no local PostgreSQL is running")
                return 1
            print(f"PostgreSQL running: DATABASE_URL={current.url}")
    except DevPostgresError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
