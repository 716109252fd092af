"""Telemetry's cost: stateless throughput with tracing off, at ratio 0.01 and at ratio 1.0.

`python -m bench.telemetry [--records 1000000] [--runs 5] [--partitions 6] [--variants ...] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.app import REPO_ROOT, AppSpec
from bench.broker import create_topics, kafka
from bench.data import fill_topic
from bench.stats import median, run_directory, write_result
from bench.throughput import Measurement, describe, fresh_output, median_of, run_app
from tests.support.jaeger_server import LocalJaeger, jaeger_is_built
from tests.support.otlp_receiver import OtlpReceiver


@dataclass(frozen=True)
class Variant:
    """An app to time: the telemetry settings of traces exported over OTLP (None: telemetry off, the
    default), and its processor."""

    telemetry: dict[str, Any] | None
    processor_class: str = "bench.processors:Transform"


VARIANTS: dict[str, Variant] = {
    "none": Variant(None),
    "ratio 0.01": Variant({"sampling_ratio": 0.01}),
    "ratio 1.0": Variant({"sampling_ratio": 1.0}),
    # Only when asked for:
    "ratio 0.01 unpropagated": Variant({"sampling_ratio": 0.01, "propagate_unsampled": False}),
    "header only": Variant(None, "bench.processors:TransformCarryingTraceparent"),
}
DEFAULT_VARIANTS = ["none", "ratio 0.01", "ratio 1.0"]
SPANS_DROPPED = re.compile(r"record spans lost: (\d+) dropped")


def telemetry_section(settings: dict[str, Any] | None, endpoint: str) -> dict[str, Any]:
    if settings is None:
        return {}
    return {**settings, "traces": {"exporter": "otlp", "endpoint": endpoint}}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.telemetry", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument(
        "--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS), help="none always runs: the baseline"
    )
    return parser.parse_args()


@contextlib.contextmanager
def otlp_receiver(workdir: Path) -> Iterator[tuple[str, str, int | None]]:
    """The local Jaeger when scripts/jaeger.sh has built it, else a sink that drops what it gets:
    (what it is, its endpoint, the process to wait for before a run)."""
    if jaeger_is_built():
        jaeger = LocalJaeger(workdir / "jaeger.log")
        jaeger.start()
        try:
            yield "Jaeger v2 (in-memory storage)", jaeger.otlp_endpoint, jaeger.pid
        finally:
            jaeger.stop()
    else:
        with OtlpReceiver() as sink:
            yield "a local OTLP sink", sink.endpoint, None


def settle(pid: int | None, timeout_s: float = 60.0) -> float:
    """Waits until the backend is idle (under 2% of a core over half a second): after a run at ratio 1.0
    Jaeger goes on storing and evicting spans for a while, which would take the cores from the next
    run. Returns the seconds waited."""
    if pid is None:
        return 0.0
    backend, started = psutil.Process(pid), time.monotonic()
    while time.monotonic() - started < timeout_s:
        before = sum(backend.cpu_times()[:2])
        time.sleep(0.5)
        if sum(backend.cpu_times()[:2]) - before < 0.01:
            break
    return time.monotonic() - started


def run_variant(
    bootstrap: str, input_topic: str, args: argparse.Namespace, workdir: Path, variant: Variant, endpoint: str
) -> tuple[Measurement, int]:
    """One run, and how many record spans the runtime logged as dropped (its export queue was full)."""
    spec = AppSpec(
        app_id=f"bench-telemetry-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=input_topic,
        output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)),
        partitions=args.partitions,
        processor_class=variant.processor_class,
        guarantee=args.guarantee,
        extra={"telemetry": telemetry_section(variant.telemetry, endpoint)} if variant.telemetry else {},
    )
    measured, process = run_app(spec, workdir, args.records)
    dropped = sum(int(match.group(1)) for match in SPANS_DROPPED.finditer(process.log_path.read_text()))
    return measured, dropped


def main() -> None:
    args = parse_args()
    workdir = run_directory("telemetry")
    input_topic = f"bench-in-{uuid.uuid4().hex[:8]}"
    variants = {name: variant for name, variant in VARIANTS.items() if name == "none" or name in args.variants}
    runs: dict[str, list[Measurement]] = {name: [] for name in variants}
    dropped: dict[str, list[int]] = {name: [] for name in variants}
    with kafka(args.bootstrap) as bootstrap, otlp_receiver(workdir) as (receiver, endpoint, backend):
        print(f"traces go over OTLP/HTTP to {receiver} at {endpoint}")
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        print(f"filling {input_topic} ({args.partitions} partitions) with {args.records:,} records ...")
        fill_rate = asyncio.run(fill_topic(bootstrap, input_topic, args.records, args.partitions))
        print(f"  produced at {fill_rate:,.0f} rec/s")
        for run in range(1, args.runs + 1):
            for name, variant in variants.items():
                settle(backend)
                measured, spans_dropped = run_variant(bootstrap, input_topic, args, workdir, variant, endpoint)
                runs[name].append(measured)
                dropped[name].append(spans_dropped)
                relative = measured.rate(args.records) / runs["none"][-1].rate(args.records)
                line = describe(f"{name:>10}", measured, args.records)
                lost = f"   spans dropped {spans_dropped:,}" if spans_dropped else ""
                print(f"run {run}/{args.runs}: {line}   /none {relative:.2f}{lost}")
    rates = {name: [m.rate(args.records) for m in measured] for name, measured in runs.items()}
    summary = {
        name: {
            "rate": median(rates[name]),
            "ratio_to_none": median([r / n for r, n in zip(rates[name], rates["none"], strict=True)]),
            "processing_rate": median_of(m.inner_rate(args.records) for m in measured),
            "spans_dropped": median(dropped[name]),
        }
        for name, measured in runs.items()
    }
    print(f"median of {args.runs} (wall clock of each process, start-up included; processing only in brackets):")
    for name, figures in summary.items():
        print(
            f"  {name:>10}: {figures['rate']:8,.0f} rec/s ({figures['processing_rate']:8,.0f} rec/s)"
            f"   /none {figures['ratio_to_none']:.2f}   spans dropped {figures['spans_dropped']:,.0f}"
        )
    path = write_result(
        workdir,
        "telemetry",
        {
            "records": args.records,
            "partitions": args.partitions,
            "guarantee": args.guarantee,
            "receiver": receiver,
            "fill_rate": fill_rate,
            "runs": {name: [asdict(m) for m in measured] for name, measured in runs.items()},
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
