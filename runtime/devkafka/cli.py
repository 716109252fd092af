"""`python -m runtime dev-kafka start|stop|status`."""

from __future__ import annotations

import argparse
import sys

from runtime.devkafka import managed
from runtime.devkafka.jars import DevKafkaError, kafka_version


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime dev-kafka",
        description="Run a local Apache Kafka (KRaft) on 127.0.0.1 for development: one node by default. Its jars "
        "and data live under RUNTIME_CACHE_DIR (default ~/.cache/kafka-actor-runtime). One runs at a time: start "
        "exits 1 when the running one is not what it asks for.",
    )
    parser.add_argument(
        "action",
        choices=["start", "stop", "status"],
        help="start the broker (or find it running), stop it, or print where it runs (exit 1: it does not)",
    )
    parser.add_argument("--port", type=int, default=None, help="start: listener port (default 9092, else a free one)")
    parser.add_argument(
        "--brokers", type=int, default=1, choices=range(1, 10), metavar="N", help="start: a cluster of N nodes"
    )
    parser.add_argument(
        "--secured",
        action="store_true",
        help="start: also SSL, mutual TLS, SASL_SSL and SASL_PLAINTEXT listeners (SCRAM-SHA-256/512, PLAIN, "
        "OAUTHBEARER) with a throwaway CA and an authorizer; status prints where their certificates and users are",
    )
    return parser


def _describe(broker: managed.RunningBroker) -> str:
    lines = [f"Kafka {kafka_version()} {{verb}} at {broker.bootstrap_servers} (pid {', '.join(map(str, broker.pids))})"]
    lines += [f"  {name}: {addresses}" for name, addresses in broker.secured.items()]
    if broker.secured:
        lines.append(f"  CA and client certificates in {managed.certificates_dir()}, users in {managed.users_file()}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.action == "start":
            broker, started = managed.start(args.port, args.brokers, args.secured)
            print(_describe(broker).format(verb="started" if started else "already running"))
        elif args.action == "stop":
            stopped = managed.stop()
            print(f"Kafka at {stopped.bootstrap_servers} stopped" if stopped else "no local Kafka is running")
        else:
            current = managed.running()
            if current is None:
                print("no local Kafka is running")
                return 1
            print(_describe(current).format(verb="running"))
    except DevKafkaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
