"""Counters of what the runtime did, for tests, logs and (later) metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Counters:
    consumed: int = 0
    processed: int = 0
    produced: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    pauses: int = 0
    resumes: int = 0
    commits: int = 0
    commit_seconds: float = 0.0
    aborted_transactions: int = 0
    fenced_tasks: int = 0
    failed_commits: int = 0
    failed_flushes: int = 0  # processors' flush() at a commit, under skip or dead_letter
    assignments: int = 0
    revocations: int = 0
    max_queued: int = 0
    restored: int = 0  # changelog records replayed (after a snapshot: only its tail)
    restore_remaining: int = 0
    global_records: int = 0
    global_store_errors: int = 0
    global_bootstrap_seconds: float = 0.0
    snapshot_ingests: int = 0  # store partitions loaded from a snapshot before their changelog tail
    snapshot_rows: int = 0
    snapshot_seconds: float = 0.0
    snapshot_records_spared: int = 0  # changelog records those loads spared replaying from the changelog's start
    broker_outages: int = 0  # times Kafka became unreachable (runtime/kafka/outages.py)
    broker_outage_seconds: float = 0.0  # how long those that ended lasted
    # What processors count themselves (`ctx.count`): {processor: {counter: total}}.
    by_processor: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, processor: str, name: str, amount: int = 1) -> None:
        counts = self.by_processor.get(processor)
        if counts is None:
            counts = self.by_processor[processor] = {}
        counts[name] = counts.get(name, 0) + amount

    def snapshot(self) -> dict[str, Any]:
        return asdict(self)
