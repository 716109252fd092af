"""Payments enriched with their account as of each payment's time: `python -m examples.enrichment.run`
(`make example-enrichment`).

Starts (or reuses) a local Kafka broker and writes one timeline of accounts and payments: every account
opened, then payments, with an account changing tier now and then between them. The accounts go to a
compacted topic, the payments to another, each keyed by account; one of the two is written to Kafka
whole before the other (they alternate from run to run). Runs the app as a user would,
`python -m runtime examples/enrichment/app.yaml --until-caught-up`, then reads the enriched payments back
and checks each against the account's version at the payment's time, computed here.

The broker keeps the topics, and the app its accounts, from one run to the next: each run's timeline
starts after the payments already in the topic, and only this run's payments are checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from examples.acquirers.run import run_app
from examples.demo_cli import run_plain_demo
from examples.enrichment.accounts import enriched, produce, timeline
from examples.payments.run import ROOT, end_offsets, ensure_topics, scan
from examples.timeline import start_after
from processors.joins import TableJoinParams
from runtime.config import load_app

APP_YAML = Path("examples/enrichment/app.yaml")  # relative to ROOT, as a user would type it


def demo(app_yaml: Path, bootstrap: str, accounts: int, payments: int, seed: int, timeout_s: float) -> list[str]:
    """One run: the timeline written, the app run, its output checked; what went wrong (nothing, when all is well)."""
    config = load_app(ROOT / app_yaml)
    [processor] = config.processors
    join = TableJoinParams.model_validate(processor.params)
    topics = {"payments": processor.inputs[0], "accounts": processor.tables[join.table].topic}
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    before = asyncio.run(end_offsets(bootstrap, {join.output: partitions[join.output]}))
    start = asyncio.run(start_after(bootstrap, topics["payments"], partitions[topics["payments"]],
                                    lambda value: int(json.loads(value)["at"]), 1_000))  # fmt: skip
    events = timeline(accounts, payments, start, seed)
    accounts_first = seed % 2 == 0
    changes = sum(1 for e in events if e.topic == "accounts") - accounts
    print(f"writing {accounts:,} accounts, {changes:,} account changes and "
          f"{len(events) - accounts - changes:,} payments (seed {seed}), "
          f"the {'accounts' if accounts_first else 'payments'} to Kafka first")  # fmt: skip
    asyncio.run(produce(bootstrap, topics, events, accounts_first))
    code, log = run_app(app_yaml, bootstrap, timeout_s)
    if code != 0:
        return [f"the app exited with {code}:\n{log[-3000:]}"]
    read: list[dict[str, Any]] = []
    tps = [TopicPartition(join.output, p) for p in range(partitions[join.output])]
    asyncio.run(scan(bootstrap, tps, before, lambda key, value: read.append(json.loads(value))))
    found = {output["stream"]["id"]: output["table"] for output in read}
    expected = enriched(events)
    print(f"  enriched payments read back: {len(read):,} of {len(expected):,}")
    problems = []
    if len(read) > len(found):
        problems.append(f"{len(read) - len(found):,} payments came out more than once")
    if missing := sorted(set(expected) - set(found)):
        problems.append(f"{len(missing):,} payments missing, e.g. {missing[0]}")
    wrong = [paid for paid in expected if paid in found and found[paid] != expected[paid]]
    if wrong:
        problems.append(f"{len(wrong):,} payments joined with the wrong account version, e.g. {wrong[0]}: "
                        f"{found[wrong[0]]} instead of {expected[wrong[0]]}")  # fmt: skip
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.enrichment.run", description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=1_000, help="accounts (default 1000)")
    parser.add_argument("--payments", type=int, default=20_000, help="payments and account changes (default 20000)")
    return run_plain_demo(
        parser,
        argv,
        lambda bootstrap, args, seed: demo(APP_YAML, bootstrap, args.accounts, args.payments, seed, args.timeout),
        "OK: every payment came out once, with its account as it was at the payment's time",
    )


if __name__ == "__main__":
    sys.exit(main())
