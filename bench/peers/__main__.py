"""This runtime beside Quix Streams, Faust, Kafka Streams and a bare aiokafka loop: the same workloads on the
same broker and the same input, in interleaved rounds.

    python -m bench.peers [--records 1000000] [--keys 100000] [--partitions 6] [--rounds 3]
                          [--peers NAME ...] [--workloads NAME ...] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.app import REPO_ROOT
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic
from bench.peers.inputs import Input
from bench.peers.measure import Outcome, measure
from bench.peers.peers import Peer, Run, all_peers, reason_to_skip
from bench.peers.report import MB, summarize, variant_ratios
from bench.peers.workloads import WINDOW_KINDS, WORKLOADS, Workload, expected_outputs
from bench.stats import run_directory, write_result
from runtime.devkafka import kafka_version

# What the figures of docs/performance.md are measured at; smaller runs are labelled as such.
FULL_SIZE = {"records": 1_000_000, "keys": 100_000, "partitions": 6, "rounds": 3}


def parse_args() -> argparse.Namespace:
    peers = [peer.name for peer in all_peers()]
    workloads = [workload.name for workload in WORKLOADS]
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--records", type=int, default=FULL_SIZE["records"])
    parser.add_argument("--keys", type=int, default=FULL_SIZE["keys"], help="distinct keys in the input")
    parser.add_argument("--partitions", type=int, default=FULL_SIZE["partitions"])
    parser.add_argument("--rounds", type=int, default=FULL_SIZE["rounds"])
    parser.add_argument("--peers", nargs="+", choices=peers, default=peers, metavar="NAME", help=", ".join(peers))
    parser.add_argument(
        "--workloads", nargs="+", choices=workloads, default=workloads, metavar="NAME", help=", ".join(workloads)
    )
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def describe(outcome: Outcome) -> str:
    def figure(value: float | None, unit: str, spec: str = ",.0f") -> str:
        return f"{value:{spec}} {unit}" if value is not None else f"- {unit}"

    return (
        f"  {outcome.peer:14}{figure(outcome.rate, 'rec/s'):>14} to last output "
        f"(steady {figure(outcome.steady_rate, 'rec/s')}), exit {outcome.exit_seconds:.1f} s, "
        f"cpu {figure(outcome.cpu_seconds, 's', '.1f')} = {figure(outcome.cpu_rate, 'rec/cpu-s')}, "
        f"rss {outcome.peak_rss / MB:.0f} MB, {outcome.outputs:,} outputs {outcome.check.detail}"
    )


def rounds(
    peers: list[Peer], workloads: list[Workload], source: Input, bootstrap: str, count: int, workdir: Path
) -> tuple[list[Outcome], dict[str, dict[str, str]]]:
    """Every peer on every workload, round after round; the order of the peers turns by one each round."""
    outcomes: list[Outcome] = []
    skipped: dict[str, dict[str, str]] = {}
    outputs = {workload.name: expected_outputs(workload, source) for workload in workloads}
    input_topic = f"bench-peers-in-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(bootstrap, {input_topic: source.partitions}))
    print(f"filling {input_topic} with {source.records:,} JSON records, {source.keys:,} keys ...", flush=True)
    fill_rate = asyncio.run(
        fill_topic(
            bootstrap, input_topic, source.records, source.partitions, source.keys, "json", timestamp=source.timestamp
        )
    )
    print(f"  produced at {fill_rate:,.0f} rec/s; {source.windows()} windows of 1 minute in its timestamps")
    with tempfile.TemporaryDirectory(prefix="bench-peers-state-") as state:
        for number in range(1, count + 1):
            turn = (number - 1) % len(peers)
            order = peers[turn:] + peers[:turn]
            for workload in workloads:
                print(f"round {number}/{count}, {workload.name} ({outputs[workload.name]:,} outputs):")
                for peer in order:
                    note = reason_to_skip(peer, workload)
                    if note is not None:
                        skipped.setdefault(workload.name, {})[peer.name] = note
                        print(f"  {peer.name:14}skipped: {note}")
                        continue
                    group = f"peers-{peer.name}-{workload.name}-{uuid.uuid4().hex[:8]}"
                    run = Run(
                        bootstrap=bootstrap,
                        workload=workload,
                        source=source,
                        input_topic=input_topic,
                        output_topic=f"{group}-out",
                        group=group,
                        state_dir=Path(state) / group,
                        outputs=outputs[workload.name],
                        workdir=workdir,
                    )
                    outcome = measure(peer, run, number)
                    outcomes.append(outcome)
                    print(describe(outcome), flush=True)
    asyncio.run(delete_topics(bootstrap, [input_topic]))
    return outcomes, skipped


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    workdir = run_directory("peers")
    peers = [peer for peer in all_peers() if peer.name in args.peers]
    workloads = [workload for workload in WORKLOADS if workload.name in args.workloads]
    for peer in peers:
        peer.prepare()
    versions = {peer.name: peer.version() for peer in peers}
    print("peers: " + "; ".join(f"{name} ({version})" for name, version in versions.items()))
    source = Input.now(args.records, args.keys, args.partitions)
    if any(workload.kind in WINDOW_KINDS for workload in workloads) and not source.last_window_holds_every_key():
        print("note: the last window lacks some keys, so closing windows by key or by partition differs there")
    with kafka(args.bootstrap) as bootstrap:
        outcomes, skipped = rounds(peers, workloads, source, bootstrap, args.rounds, workdir)
    settings: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        settings.setdefault(outcome.peer, {}).setdefault(outcome.workload, outcome.settings)
    result = {
        "command": " ".join(["python -m bench.peers", *sys.argv[1:]]),
        "full_size": all(getattr(args, name) >= size for name, size in FULL_SIZE.items()),
        "input": {"records": source.records, "keys": source.keys, "partitions": source.partitions},
        "rounds": args.rounds,
        "peers": [peer.name for peer in peers],
        "workloads": {workload.name: asdict(workload) for workload in workloads},
        "broker": f"Kafka {kafka_version()}, one local node" if not args.bootstrap else f"at {args.bootstrap}",
        "versions": versions,
        "settings": settings,
        "skipped": skipped,
        "summary": summarize(outcomes),
        "runs": [{**asdict(outcome), "rate": outcome.rate, "cpu_rate": outcome.cpu_rate} for outcome in outcomes],
        "seconds": time.perf_counter() - started,
    }
    for line in variant_ratios(result["summary"], {workload.name: asdict(workload) for workload in workloads}):
        print(line)
    path = write_result(workdir, "peers", result)
    print(f"result: {path.relative_to(REPO_ROOT)} ({result['seconds'] / 60:.1f} min in all)")
    print(f"tables: python -m bench.peers.report {path.relative_to(REPO_ROOT)} [--write docs/performance.md]")


if __name__ == "__main__":
    main()
