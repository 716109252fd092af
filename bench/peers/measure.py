"""One peer process on one workload, measured: the wall clock until its last output was visible, its steady
rate, its CPU time and peak RSS, and its output read back and checked."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from typing import Any

from bench.broker import create_topics, delete_topics, topic_names
from bench.peers.inputs import Input
from bench.peers.outputs import VisibleOutputs, read_back
from bench.peers.peers import Peer, Run
from bench.peers.workloads import WINDOW_EARLY, WINDOW_KINDS, Check, Workload, output_check

# The stateless and count jobs write one output per input: their steady rate is that of the outputs
# between these two fractions of the final count.
STEADY_FROM, STEADY_TO = 0.1, 0.9


@dataclass(frozen=True)
class Outcome:
    """One process: `visible_seconds` runs from its start to its last output visible to a read_committed
    reader (None if it wrote nothing); `exit_seconds` to its exit."""

    peer: str
    workload: str
    round: int
    records: int
    outputs: int
    visible_seconds: float | None
    exit_seconds: float
    steady_rate: float | None
    cpu_seconds: float | None
    peak_rss: int
    exit_code: int
    check: Check
    settings: dict[str, Any]
    log: str

    @property
    def rate(self) -> float | None:
        """Input records per second of wall clock, start-up included, until the last output was visible."""
        return self.records / self.visible_seconds if self.visible_seconds else None

    @property
    def cpu_rate(self) -> float | None:
        """Input records per CPU second (user + system) of the process and its threads, start-up included."""
        return self.records / self.cpu_seconds if self.cpu_seconds else None


def timeout_for(records: int) -> float:
    """Generous: the slowest peer (Faust, counting) reads some 500 to 1,000 records per second."""
    return max(300.0, records / 200)


def measure(peer: Peer, run: Run, round_number: int) -> Outcome:
    """Start `peer` on `run`, wait for it to exit, read its output back; then drop its topics and state."""
    asyncio.run(create_topics(run.bootstrap, {run.output_topic: run.source.partitions}))
    with VisibleOutputs(run.bootstrap, run.output_topic) as visible:
        process = peer.start(run)
        code = process.wait_sampling_rss(timeout_for(run.source.records))
    check = output_check(run.workload, run.source)
    outputs = asyncio.run(read_back(run.bootstrap, run.output_topic, check))
    verdict = check.result()
    if code != 0:
        verdict = Check(False, f"exit code {code}; {verdict.detail}")
    if visible.error is not None:
        verdict = Check(False, f"output not sampled ({visible.error!r}); {verdict.detail}")
    last = visible.first_at_least(visible.final)
    outcome = Outcome(
        peer=peer.name,
        workload=run.workload.name,
        round=round_number,
        records=run.source.records,
        outputs=outputs,
        visible_seconds=last - process.started if last is not None else None,
        exit_seconds=process.wall_seconds,
        steady_rate=steady_rate(run.workload, run.source, visible),
        cpu_seconds=process.cpu_seconds,
        peak_rss=process.peak_rss,
        exit_code=code,
        check=verdict,
        settings=peer.settings(run, process),
        log=str(process.log_path),
    )
    clean_up(run)
    return outcome


def steady_rate(workload: Workload, source: Input, visible: VisibleOutputs) -> float | None:
    """Input records per second while the peer is in full swing, start-up and shutdown left out.

    One output per input: the outputs between 10% and 90% of the final count (so too with early
    results, one per input record). The window job writes its results in bursts, when windows close: the
    input between the first burst and the last (the windows after the first, but the last, which stays
    open) over the time between them.
    """
    if workload.kind in WINDOW_KINDS and workload.kind != WINDOW_EARLY:
        first, last = visible.first_at_least(1), visible.first_at_least(visible.final)
        inputs = (source.windows() - 2) * source.records_per_window
    else:
        first, last = (
            visible.first_at_least(STEADY_FROM * visible.final),
            visible.first_at_least(STEADY_TO * visible.final),
        )
        inputs = round((STEADY_TO - STEADY_FROM) * source.records)
    if first is None or last is None or last <= first or inputs <= 0:
        return None
    return inputs / (last - first)


def clean_up(run: Run) -> None:
    """Delete the topics whose names hold the run's group id (its output topic, and the peer's changelogs and
    other internal topics, which every peer names after its group or application id), and its state."""
    topics = [name for name in asyncio.run(topic_names(run.bootstrap)) if run.group in name]
    asyncio.run(delete_topics(run.bootstrap, topics))
    shutil.rmtree(run.state_dir, ignore_errors=True)
