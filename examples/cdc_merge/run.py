"""Seed 001's merge join, end to end: `python -m examples.cdc_merge.run` (`make example-cdc`).

Starts (or reuses) a local Kafka broker and writes what a CDC connector would: each transaction's rows
(1 to 50, a few hundred bytes each) to `cdc-data`, 6 partitions by primary key, then the transaction's
record to `cdc-transactions`, one partition. Runs the app as a user would,
`python -m runtime examples/cdc_merge/app.yaml --until-caught-up`, exactly-once, then reads the joined
rows back (read_committed) and checks that each row came out once, joined with its own transaction,
and that no row was unmatched.

The broker keeps the topics, and the app its positions, from one run to the next: each run's
transactions come after those already in the topic, and only this run's rows are checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

from aiokafka import TopicPartition

from examples.acquirers.run import run_app
from examples.cdc_merge.changes import FIRST_LSN, Transaction, joined, produce, transactions
from examples.demo_cli import run_plain_demo
from examples.payments.run import ROOT, end_offsets, ensure_topics, high_watermarks, scan
from processors.joins import MergeJoinParams
from runtime.config import load_app

APP_YAML = Path("examples/cdc_merge/app.yaml")  # relative to ROOT, as a user would type it


async def last_transaction_id(bootstrap: str, topic: str) -> int:
    """The id of the last transaction in the topic (of an earlier run), else where ids start."""
    tp = TopicPartition(topic, 0)
    end = (await high_watermarks(bootstrap, [tp]))[tp]
    if end == 0:
        return FIRST_LSN
    ids: list[int] = []
    await scan(bootstrap, [tp], {tp: end - 1}, lambda key, value: ids.append(json.loads(value)["id"]))
    return max(ids, default=FIRST_LSN)


async def read_since(bootstrap: str, topic: str, partitions: int, start: dict[TopicPartition, int]) -> list[str]:
    found: list[str] = []
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    await scan(
        bootstrap,
        tps,
        start,
        lambda key, value: found.append(json.dumps([(key or b"").decode(), json.loads(value)], sort_keys=True)),
    )
    return found


def demo(app_yaml: Path, bootstrap: str, count: int, seed: int, timeout_s: float) -> list[str]:
    """Write `count` transactions, run the app, check its output; what went wrong (nothing, when all is well)."""
    config = load_app(ROOT / app_yaml)
    join = MergeJoinParams.model_validate(config.processors[0].params)
    assert join.unmatched_topic is not None, "the example's app sends unmatched rows to a topic of their own"
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    outputs = {join.output: partitions[join.output], join.unmatched_topic: partitions[join.unmatched_topic]}
    before = asyncio.run(end_offsets(bootstrap, outputs))
    after = asyncio.run(last_transaction_id(bootstrap, join.transactions))
    changes: list[Transaction] = list(transactions(count, seed, after=after))
    rows = sum(len(t.rows) for t in changes)
    print(f"writing {count:,} transactions with {rows:,} rows (seed {seed}): rows to '{join.data}' "
          f"({partitions[join.data]} partitions), then each transaction to '{join.transactions}'")  # fmt: skip
    asyncio.run(produce(bootstrap, join.data, join.transactions, changes))
    code, log = run_app(app_yaml, bootstrap, timeout_s)
    if code != 0:
        return [f"the app exited with {code}:\n{log[-3000:]}"]
    out = asyncio.run(read_since(bootstrap, join.output, outputs[join.output], before))
    unmatched = asyncio.run(read_since(bootstrap, join.unmatched_topic, outputs[join.unmatched_topic], before))
    expected = Counter(json.dumps([key, value], sort_keys=True) for key, value in joined(changes))
    found = Counter(out)
    print(f"  joined rows read back: {sum(found.values()):,}; unmatched: {len(unmatched):,}")
    problems = []
    if missing := expected - found:
        problems.append(f"{sum(missing.values()):,} rows missing, e.g. {next(iter(missing))[:200]}")
    if extra := found - expected:
        example = next(iter(extra))[:200]
        problems.append(f"{sum(extra.values()):,} rows that should not be there (or twice), e.g. {example}")
    if unmatched:
        problems.append(f"{len(unmatched):,} rows unmatched, e.g. {unmatched[0][:200]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.cdc_merge.run", description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=2_000, help="transactions to write (default 2000)")
    return run_plain_demo(
        parser,
        argv,
        lambda bootstrap, args, seed: demo(APP_YAML, bootstrap, args.transactions, seed, args.timeout),
        "OK: every row came out once, joined with its own transaction, and none unmatched",
    )


if __name__ == "__main__":
    sys.exit(main())
