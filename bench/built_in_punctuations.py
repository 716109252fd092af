"""What the built-in operators' stream-time punctuations cost a record, in instructions: `Aggregate` (tumbling,
sliding, session), `WindowJoin` (outer) and `Deduplicate` through the test kit's driver, under cachegrind,
in this tree and, with `--baseline TREE`, in another (a checkout from before them).

`python -m bench.built_in_punctuations [--cases tumbling sliding session join dedup] [--baseline TREE]
[--runs 3] [--records 4000] [--small 1000]`

No broker. One partition, 1,000 keys, a record a millisecond: each record moves stream time, the worst
case for a punctuation due every millisecond (sliding windows, sessions, the join), which ends the
task's batch after each such record. The records are piped in lists of 500, as a fetch hands them over.
Per record = (instructions over `--records` - instructions over `--small`) / the difference, so start-up
cancels out; the median of `--runs`. A run under cachegrind takes about a minute.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KEYS = 1000
LIST = 500
START = 1_740_000_000_000
TOPIC = {"partitions": 1, "key_serde": "str", "value_serde": "msgpack"}
INSTRUCTIONS = re.compile(r"I\s+refs:\s+([\d,]+)")
HERE = Path(__file__).resolve()
CASES = ("tumbling", "sliding", "session", "join", "dedup")
WINDOWS = {
    "tumbling": {"type": "tumbling", "size_ms": 60_000},
    "sliding": {"type": "sliding", "time_difference_ms": 5000},
    "session": {"type": "session", "gap_ms": 5000},
}


def app(case: str) -> dict[str, Any]:
    params: dict[str, Any]
    inputs, params = ["in"], {"output": "out"}
    if case == "join":
        inputs, processor = ["in", "in2"], "processors.joins:WindowJoin"
        params |= {"left": "in", "right": "in2", "time_difference_ms": 5000, "join": "outer"}
    elif case == "dedup":
        processor, params = "processors.dedup:Deduplicate", params | {"window_ms": 60_000}
    else:
        processor, params = "processors.windows:Aggregate", params | {"window": WINDOWS[case],
                                                                      "aggregation": {"type": "count"}}  # fmt: skip
    spec = {"name": "p", "class": processor, "inputs": inputs, "outputs": ["out"], "params": params}
    return {"app_id": "punctuations", "topics": {"in": TOPIC, "in2": TOPIC, "out": TOPIC}, "processors": [spec]}


def run(case: str, records: int) -> None:
    """The measured run, in the tree PYTHONPATH names (run as `python -P`, so that bench/ does not shadow
    `processors`), imported here: the parent needs none of it."""
    import msgpack

    from runtime.testkit import AppDriver

    logging.disable(logging.WARNING)
    value = msgpack.packb({"n": 1})
    with tempfile.TemporaryDirectory() as state, AppDriver(app(case), state_dir=Path(state)) as driver:
        for first in range(0, records, LIST):
            for offset in range(first, min(first + LIST, records)):
                topic = "in2" if case == "join" and offset % 2 else "in"
                driver.topics.append(topic, 0, f"k{offset % KEYS}".encode(), value, [], START + offset)
            driver.commit()  # delivers what was appended, as each call of the driver does


def instructions(tree: Path, case: str, records: int) -> int:
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, "-P", str(HERE), "--one", case, str(records)]  # fmt: skip
    done = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, check=True)  # fmt: skip
    found = INSTRUCTIONS.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from cachegrind: {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_record(tree: Path, case: str, records: int, small: int) -> float:
    return (instructions(tree, case, records) - instructions(tree, case, small)) / (records - small)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.built_in_punctuations", description=__doc__)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--baseline", type=Path, help="another source tree to measure the same way")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--one", nargs=2, metavar=("CASE", "RECORDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run(args.one[0], int(args.one[1]))
        return
    from bench.stats import median, run_directory, write_result

    trees = {"this tree": HERE.parents[1], **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    result: dict[str, dict[str, float]] = {}
    for case in args.cases:
        for name, tree in trees.items():
            runs = [per_record(tree, case, args.records, args.small) for _ in range(args.runs)]
            result.setdefault(case, {})[name] = median(runs)
            print(f"{case:9} {name:10} {median(runs):>10,.0f} instructions/record  (runs {runs})", flush=True)
    write_result(run_directory("built_in_punctuations"), "built_in_punctuations", {"per_record": result})


if __name__ == "__main__":
    main()
