"""The dead-letter path in instructions per record: `bench.dead_letter`'s two apps under cachegrind.

On a small shared machine the wall-clock ratio of `bench.dead_letter` moves by a tenth from run to run;
the instructions each record costs do not. Each app runs over a large and a small input, so start-up cancels
out: per record = (instructions(large) - instructions(small)) / (large - small). **ok** sends every record
on (`bench.processors:Transform`), **failing** does the same and raises (`bench.processors:Rejecting`), every
record dead-lettered. The figure is ok's instructions over failing's: the throughput ratio the processing
would have if instructions were all it cost. `--baseline TREE` counts another checkout's runtime too.

`python -m bench.dead_letter_instructions [--records 30000] [--small 2000] [--baseline DIR] [--bootstrap HOST:PORT]`
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import uuid
from pathlib import Path

from bench.app import REPO_ROOT, AppSpec
from bench.broker import create_topics, kafka
from bench.data import fill_topic
from bench.instructions import PARTITIONS, instructions
from bench.stats import run_directory, write_result
from bench.throughput import fresh_output

VARIANTS = {"ok": "bench.processors:Transform", "failing": "bench.processors:Rejecting"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dead_letter_instructions", description=__doc__)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--small", type=int, default=2_000, help="the input whose count is subtracted")
    parser.add_argument("--baseline", type=Path, help="another checkout whose runtime is counted too")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


def counted(bootstrap: str, topic: str, processor_class: str, workdir: Path, tree: Path) -> int:
    """Instructions of one app of `tree` over `topic`, its failures dead-lettered."""
    dead_letters = f"bench-dlq-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(bootstrap, {dead_letters: PARTITIONS}))
    spec = AppSpec(
        app_id=f"bench-dl-instructions-{uuid.uuid4().hex[:8]}",
        bootstrap=bootstrap,
        input_topic=topic,
        output_topic=asyncio.run(fresh_output(bootstrap, PARTITIONS)),
        partitions=PARTITIONS,
        processor_class=processor_class,
        extra={"errors": {"processing": "dead_letter", "dead_letter_topic": dead_letters}},
    )
    return instructions(spec, workdir, tree)


def main() -> None:
    args = parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench.dead_letter_instructions needs valgrind (Debian's package valgrind)")
    workdir = run_directory("dead_letter_instructions")
    inputs = {args.records: f"bench-in-{uuid.uuid4().hex[:8]}", args.small: f"bench-in-{uuid.uuid4().hex[:8]}"}
    trees = {"this": REPO_ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    per_record: dict[str, dict[str, float]] = {}
    with kafka(args.bootstrap) as bootstrap:
        asyncio.run(create_topics(bootstrap, dict.fromkeys(inputs.values(), PARTITIONS)))
        for count, topic in inputs.items():
            asyncio.run(fill_topic(bootstrap, topic, count, PARTITIONS))
        for tree_name, tree in trees.items():
            figures = per_record[tree_name] = {}
            for variant, processor_class in VARIANTS.items():
                large, small = (counted(bootstrap, inputs[n], processor_class, workdir, tree) for n in inputs)
                figures[variant] = (large - small) / (args.records - args.small)
            print(
                f"{tree_name:>8}: ok {figures['ok']:9,.0f}, failing {figures['failing']:9,.0f} instructions per "
                f"record; ok/failing {figures['ok'] / figures['failing']:.3f}",
                flush=True,
            )
    path = write_result(
        workdir, "dead_letter_instructions", {"records": args.records, "small": args.small, "per_record": per_record}
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
