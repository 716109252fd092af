"""`python -m runtime dev-kafka start|stop|status`."""

from __future__ import annotations

import argparse
import sys

from runtime.devkafka import managed
from runtime.devkafka.jars import DevKafkaError, kafka_version


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime dev-kafka",
        description="Run a local single-node Apache Kafka (KRaft) on 127.0.0.1 for development. Its jars and "
        "data live under RUNTIME_CACHE_DIR (default ~/.cache/kafka-actor-runtime).",
    )
    parser.add_argument(
        "action",
        choices=["start", "stop", "status"],
        help="start the broker (or find it running), stop it, or print where it runs (exit 1: it does not)",
    )
    parser.add_argument("--port", type=int, default=None, help="start: listener port (default 9092, else a free one)")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.action == "start":
            broker, started = managed.start(args.port)
            verb = "started" if started else "already running"
            print(f"Kafka {kafka_version()} {verb} at {broker.bootstrap_servers} (pid {broker.pid})")
        elif args.action == "stop":
            stopped = managed.stop()
            print(f"Kafka at {stopped.bootstrap_servers} stopped" if stopped else "no local Kafka is running")
        else:
            current = managed.running()
            if current is None:
                print("no local Kafka is running")
                return 1
            print(f"Kafka {kafka_version()} running at {current.bootstrap_servers} (pid {current.pid})")
    except DevKafkaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
