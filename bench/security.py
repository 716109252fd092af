"""Throughput over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512): what TLS and authentication cost the
stateless Transform and the counting app with a RocksDB store and its changelog.

`python -m bench.security [--records 200000] [--keys 100000] [--runs 3] [--partitions 6]`

One broker with secured listeners (`runtime/devkafka/secured.py`, a throwaway CA) serves all three, so
the broker, its data and its settings are the same and only the connection differs. Runs alternate
between the listeners, each round in another order after one uncounted warm-up run, so that other load
on the machine weighs on each alike. Besides the runtime's CPU time, the broker's (its JVM's, over each
run) is measured: TLS and SCRAM cost it too. Every client of the app (its
consumer, producers, admin client, changelog) connects through the listener under test
(`kafka.security`); the input is filled, and the outputs counted, over PLAINTEXT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.app import REPO_ROOT, AppSpec
from bench.broker import create_topics, delete_topics
from bench.data import fill_topic
from bench.stateful import STORE, count_store
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, describe, median_of, run_app
from runtime.devkafka import LocalBroker
from runtime.devkafka.certificates import make_certificates
from runtime.devkafka.secured import Security

APPS = ("stateless", "stateful")
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER = "bench"


@dataclass(frozen=True)
class Listener:
    """How the app reaches the broker: the listener's address and the app's `kafka.security`."""

    name: str
    address: str
    security: dict[str, Any]

    def kafka(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"bootstrap_servers": self.address}
        if self.security:
            settings["security"] = self.security
        return settings


@dataclass(frozen=True)
class ListenerRun:
    """One run of the app, and the CPU time the broker spent meanwhile (on this run's connections, mostly)."""

    app: Measurement
    broker_cpu_seconds: float

    def broker_cpu_rate(self, records: int) -> float:
        return records / self.broker_cpu_seconds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.security", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys in the input")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--guarantee", default="at_least_once", choices=["at_least_once", "exactly_once"])
    return parser.parse_args()


@contextmanager
def secured_broker() -> Iterator[tuple[LocalBroker, list[Listener]]]:
    """One broker with its PLAINTEXT, SSL and SASL_SSL listeners, running until the block ends."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while new topics' leaders settle
    with tempfile.TemporaryDirectory(prefix="bench-security-") as data:
        certificates = make_certificates(Path(data) / "certificates")
        password = secrets.token_hex(12)
        users = {"admin": secrets.token_hex(12), USER: password}
        broker = LocalBroker(data_dir=Path(data) / "broker", security=Security(certificates, users))
        print("starting a local Kafka broker with secured listeners ...", flush=True)
        broker.start()
        tls = {"ca_file": str(certificates.ca_file)}
        sasl = {"mechanism": "SCRAM-SHA-512", "username": USER, "password": "${BENCH_KAFKA_PASSWORD}"}
        os.environ["BENCH_KAFKA_PASSWORD"] = password  # the runtime's subprocesses inherit it; the YAML names it
        try:
            yield (
                broker,
                [
                    Listener("PLAINTEXT", broker.address("PLAINTEXT"), {}),
                    Listener("SSL", broker.address("SSL"), {"protocol": "SSL", "tls": tls}),
                    Listener(
                        "SASL_SSL", broker.address("SASL_SSL"), {"protocol": "SASL_SSL", "tls": tls, "sasl": sasl}
                    ),
                ],
            )
        finally:
            broker.stop()


def run_one(
    app: str, broker: LocalBroker, listener: Listener, input_topic: str, args: argparse.Namespace, workdir: Path
) -> ListenerRun:
    """One `--until-caught-up` run of the app over the whole input; its output, state and changelog deleted."""
    plaintext = broker.bootstrap_servers
    output = f"bench-out-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(plaintext, {output: args.partitions}))
    state_dir = workdir / "state"
    spec = AppSpec(
        app_id=f"bench-{app}-{listener.name.lower()}-{uuid.uuid4().hex[:8]}",
        bootstrap=plaintext,  # where the output is counted; the app's `kafka:` below names the listener
        input_topic=input_topic,
        output_topic=output,
        partitions=args.partitions,
        processor_class="bench.processors:CountPerKey" if app == "stateful" else "bench.processors:Transform",
        guarantee=args.guarantee,
        extra={"kafka": listener.kafka(), "state_dir": str(state_dir)},
        processor_name="count" if app == "stateful" else "transform",
        stores=count_store("rocksdb") if app == "stateful" else {},
    )
    broker_cpu = broker_cpu_seconds(broker)
    measured, _ = run_app(spec, workdir, args.records)
    broker_cpu = broker_cpu_seconds(broker) - broker_cpu
    if measured.records_out < args.records:
        raise RuntimeError(f"{spec.app_id} wrote {measured.records_out} of {args.records} records")
    if app == "stateful":
        shutil.rmtree(state_dir / spec.app_id, ignore_errors=True)
        asyncio.run(delete_topics(plaintext, [f"{spec.app_id}-{STORE}-changelog"]))
    return ListenerRun(measured, broker_cpu)


def broker_cpu_seconds(broker: LocalBroker) -> float:
    """User + system CPU time the broker's JVM has used so far: TLS and SCRAM cost it too."""
    assert broker.process is not None
    times = psutil.Process(broker.process.pid).cpu_times()
    return float(times.user + times.system)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    args = parse_args()
    workdir = run_directory("security")
    records = args.records
    runs: dict[str, dict[str, list[ListenerRun]]] = {app: {name: [] for name in LISTENERS} for app in APPS}
    loads = [load_average()]
    with secured_broker() as (broker, listeners):
        input_topic = f"bench-in-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topics(broker.bootstrap_servers, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {records:,} records ...")
        rate = asyncio.run(fill_topic(broker.bootstrap_servers, input_topic, records, args.partitions, args.keys))
        print(f"  produced at {rate:,.0f} rec/s")
        print("warming up (one stateless run over PLAINTEXT, not counted) ...")
        run_one("stateless", broker, listeners[0], input_topic, args, workdir)
        for number in range(1, args.runs + 1):
            for app in APPS:
                for listener in listeners[number % 3 :] + listeners[: number % 3]:  # none always first
                    run = run_one(app, broker, listener, input_topic, args, workdir)
                    runs[app][listener.name].append(run)
                    described = describe(f"{app:9} {listener.name:9}", run.app, records)
                    print(f"run {number}/{args.runs} {described}, broker cpu {run.broker_cpu_seconds:.2f} s")
            loads.append(load_average())
    summary = {
        app: {
            name: {
                "rate": median([r.app.rate(records) for r in listener_runs]),
                "processing_rate": median_of(r.app.inner_rate(records) for r in listener_runs),
                "cpu_rate": median_of(r.app.cpu_rate(records) for r in listener_runs),
                "broker_cpu_rate": median([r.broker_cpu_rate(records) for r in listener_runs]),
            }
            for name, listener_runs in by_listener.items()
        }
        for app, by_listener in runs.items()
    }
    print(f"median of {args.runs}, {args.guarantee}, {records:,} records; load average (1 5 15 min) at the start")
    print(f"and after each round: {' -> '.join(loads)}")
    print(
        f"  {'app':9} {'listener':9} {'rec/s':>8} {'/PT':>5} {'rec/runtime CPU s':>17} {'/PT':>5} "
        f"{'rec/broker CPU s':>16} {'/PT':>5}"
    )
    for app in APPS:
        base = summary[app]["PLAINTEXT"]
        for name in LISTENERS:
            figures = summary[app][name]
            print(
                f"  {app:9} {name:9} {figures['rate']:8,.0f} {figures['rate'] / base['rate']:5.2f} "
                f"{figures['cpu_rate']:17,.0f} {figures['cpu_rate'] / base['cpu_rate']:5.2f} "
                f"{figures['broker_cpu_rate']:16,.0f} {figures['broker_cpu_rate'] / base['broker_cpu_rate']:5.2f}"
            )
    path = write_result(
        workdir,
        "security",
        {
            "records": records,
            "keys": args.keys,
            "partitions": args.partitions,
            "guarantee": args.guarantee,
            "load_average": loads,
            "runs": {app: {name: list(map(asdict, rs)) for name, rs in by.items()} for app, by in runs.items()},
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
