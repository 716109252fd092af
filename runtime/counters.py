"""Counters of what the runtime did, for tests, logs and (later) metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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

    def snapshot(self) -> dict[str, float]:
        return asdict(self)
