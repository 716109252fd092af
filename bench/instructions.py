"""Telemetry's cost in instructions per record: the stateless app of bench.telemetry under cachegrind.

Wall-clock ratios on a small shared machine move by a tenth from run to run; instruction counts do
not. Each variant runs twice, over a large and a small input, so start-up cancels out:
per record = (instructions(large) - instructions(small)) / (large - small). Traces go to a local
OTLP sink (what a backend does with them is not the app's cost). Needs valgrind.

`python -m bench.instructions [--records 100000] [--small 2000] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.app import REPO_ROOT, AppSpec, python_path
from bench.broker import create_topics, kafka
from bench.data import fill_topic
from bench.stats import run_directory, write_result
from bench.telemetry import telemetry_section
from bench.throughput import fresh_output
from tests.support.otlp_receiver import OtlpReceiver

VARIANTS = {"none": None, "ratio 0": 0.0, "ratio 0.01": 0.01}
INSTRUCTIONS = re.compile(r"I\s+refs:\s+([\d,]+)")
REVOKED = re.compile(r"'revocations': [1-9]")
PARTITIONS = 6
COMMIT_INTERVAL_MS = 3_600_000
SESSION_TIMEOUT_MS = 300_000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=2_000, help="the input whose count is subtracted")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def under_cachegrind(spec: AppSpec) -> AppSpec:
    """`spec` for a run ~50x slower than usual: commits on a clock rarely, unless it says how often (they would
    count many times over), and a session timeout its heartbeats meet (a rebalance would count records twice)."""
    kafka_section = {**spec.to_yaml()["kafka"], "consumer": {"session_timeout_ms": SESSION_TIMEOUT_MS}}
    return replace(spec, extra={"commit_interval_ms": COMMIT_INTERVAL_MS, **spec.extra, "kafka": kafka_section})


def instructions(spec: AppSpec, workdir: Path, tree: Path = REPO_ROOT) -> int:
    """Instructions the runtime of `tree` executed to process `spec`'s input until caught up."""
    spec = under_cachegrind(spec)
    log = workdir / f"{spec.app_id}.log"
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, "-m", "runtime", str(spec.write(workdir)), "--until-caught-up"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": python_path(tree)}
    with log.open("wb") as output:
        code = subprocess.run(
            command, cwd=tree, env=env, stdout=output, stderr=subprocess.STDOUT, check=False
        ).returncode
    text = log.read_text()
    found = INSTRUCTIONS.findall(text)
    if code != 0 or not found:
        raise RuntimeError(f"the runtime under cachegrind exited with {code}; log {log}")
    if REVOKED.search(text):
        raise RuntimeError(f"the group rebalanced during the run, so records were processed twice; log {log}")
    return int(found[-1].replace(",", ""))


def main() -> None:
    args = parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench.instructions needs valgrind (Debian's package valgrind)")
    workdir = run_directory("instructions")
    inputs = {args.records: f"bench-in-{uuid.uuid4().hex[:8]}", args.small: f"bench-in-{uuid.uuid4().hex[:8]}"}
    per_record: dict[str, float] = {}
    with kafka(args.bootstrap) as bootstrap, OtlpReceiver() as sink:
        asyncio.run(create_topics(bootstrap, dict.fromkeys(inputs.values(), PARTITIONS)))
        for count, topic in inputs.items():
            asyncio.run(fill_topic(bootstrap, topic, count, PARTITIONS))
        for name, ratio in VARIANTS.items():
            counted: dict[int, int] = {}
            for count, topic in inputs.items():
                telemetry: dict[str, Any] = telemetry_section(
                    None if ratio is None else {"sampling_ratio": ratio}, sink.endpoint
                )
                spec = AppSpec(
                    app_id=f"bench-instructions-{uuid.uuid4().hex[:8]}",
                    bootstrap=bootstrap,
                    input_topic=topic,
                    output_topic=asyncio.run(fresh_output(bootstrap, PARTITIONS)),
                    partitions=PARTITIONS,
                    processor_class="bench.processors:Transform",
                    extra={"telemetry": telemetry} if telemetry else {},
                )
                counted[count] = instructions(spec, workdir)
            per_record[name] = (counted[args.records] - counted[args.small]) / (args.records - args.small)
            more = per_record[name] / per_record["none"] - 1
            print(f"{name:>10}: {per_record[name]:9,.0f} instructions per record  {more:+.1%} against none", flush=True)
    path = write_result(workdir, "instructions", {"records": args.records, "small": args.small,
                                                  "per_record": per_record})  # fmt: skip
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
