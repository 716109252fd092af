"""`python -m runtime dev-postgres start|stop|status`."""

from __future__ import annotations

import argparse
import sys

from runtime.devkafka.jars import DevKafkaError
from runtime.devpostgres import managed
from runtime.devpostgres.server import DevPostgresError


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime dev-postgres",
        description="Run a local PostgreSQL (Debian's package, a throwaway cluster) on 127.0.0.1 for development, "
        "and print its DATABASE_URL. Its data lives under RUNTIME_CACHE_DIR (default ~/.cache/kafka-actor-runtime; "
        "as root, the system's temporary directory).",
    )
    parser.add_argument(
        "action",
        choices=["start", "stop", "status"],
        help="start the server (or find it running), stop it, or print its DATABASE_URL (exit 1: not running)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="start: port (default 5432 or the last one, else a free one)"
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="start: serve TLS only, with a certificate for 127.0.0.1 from the throwaway CA the secured local "
        "Kafka uses; the DATABASE_URL printed verifies it (sslmode=verify-full&sslrootcert=<the CA's file>). "
        "Without it, a server already running is taken as it is, else one without TLS is started",
    )
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.action == "start":
            server, started = managed.start(args.port, True if args.tls else None)
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
    except (DevPostgresError, DevKafkaError) as error:  # DevKafkaError: the certificates could not be made
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
