"""What the windowed demos share: their command line (events out of order, the seed, the broker, the
verdict), the app's count of late records, and times as they print them."""

from __future__ import annotations

import argparse
import logging
import random
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime

from examples.broker import kafka
from examples.disorder import Disorder, disorder_of

LATE_COUNTED = re.compile(r"'late_records': (\d+)")  # the processor's counter, in the worker's last log line
Demo = Callable[[str, argparse.Namespace, Disorder, int], list[str]]  # (bootstrap, arguments, ..., seed) -> problems


PlainDemo = Callable[[str, argparse.Namespace, int], list[str]]  # (bootstrap, arguments, seed) -> problems


def run_demo(parser: argparse.ArgumentParser, argv: list[str] | None, demo: Demo, success: str) -> int:
    """Add `--seed`, `--timeout` and `--keep-broker` to `parser` (which has `add_disorder_options`'), run
    `demo` against the Kafka of `examples.broker`, and print what it found wrong, or `success`; the exit code."""
    args, seed = _parsed(parser, argv)
    disorder = disorder_of(parser, args)
    with kafka(args.keep_broker) as bootstrap:
        problems = demo(bootstrap, args, disorder, seed)
    return _verdict(problems, success)


def run_plain_demo(parser: argparse.ArgumentParser, argv: list[str] | None, demo: PlainDemo, success: str) -> int:
    """`run_demo`, for a demo whose input is not out of order."""
    args, seed = _parsed(parser, argv)
    with kafka(args.keep_broker) as bootstrap:
        problems = demo(bootstrap, args, seed)
    return _verdict(problems, success)


def _parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, int]:
    parser.add_argument("--seed", type=int, help="default: a new one each run (printed, to reproduce it)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the app may take")
    parser.add_argument("--keep-broker", action="store_true", help="leave a broker started here running")
    args = parser.parse_args(argv)
    # The producers retry on their own while new topics elect their leaders; what they give up on still raises.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    return args, args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)


def _verdict(problems: list[str], success: str) -> int:
    if problems:
        print("FAILED:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(success)
    return 0


def late_counted(log: str) -> int:
    """The app's count of late records, from the counters the worker logs as it stops."""
    return sum(int(found) for found in LATE_COUNTED.findall(log))


def clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
