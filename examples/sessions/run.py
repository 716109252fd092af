"""The sessions demo: `python -m examples.sessions.run` (`make example-sessions`).

Starts (or reuses) a local Kafka broker and produces the clicks of users who come and go (clicks.py):
each user's sessions are known as they were made, and a share of the clicks reach Kafka out of order,
within the grace period. Runs the app as a user would, `python -m runtime examples/sessions/app.yaml
--until-caught-up`, then reads the sessions it sent back and checks them against those made: each
session that closed (no click of its user for the gap, plus the grace, in the stream time of the
user's partition) sent once, from its first click to its last, with its number of clicks; none split
or merged; no click late. The sessions still open at the end are reported: the app sends them once
later clicks move the stream time on.

As in the per-minute totals demo, each run's clicks come after those of earlier runs (by more than
the gap: a user's new session does not join the last one), and only this run's sessions are checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from examples.acquirers.generate import produce
from examples.acquirers.run import run_app
from examples.demo_cli import clock, late_counted, run_demo
from examples.disorder import Disorder, add_disorder_options
from examples.payments.run import ROOT, end_offsets, ensure_topics
from examples.sessions.clicks import Activity, Session, make_activity
from examples.timeline import a_day_ago, reaches_past_the_clock, start_after, start_over
from examples.window_results import check_windows, read_windows
from runtime.config import AppConfig, load_app
from stores.partitioner import partition_for

APP_YAML = Path("examples/sessions/app.yaml")  # relative to ROOT, as a user would type it

Span = tuple[str, int, int]  # (user, first click, last click)


@dataclass(frozen=True)
class SessionApp:
    """What the demo needs to know of the app: its topics and sessions, as the YAML names them."""

    input: str
    output: str
    gap_ms: int
    grace_ms: int

    @classmethod
    def of(cls, config: AppConfig) -> SessionApp:
        processor = config.processors[0]
        params, window = processor.params, processor.params["window"]
        return cls(processor.inputs[0], params["output"], window["gap_ms"], window["grace_ms"])

    def closes_at(self, session: Session) -> int:
        """The stream time at which no click can join the session any more, however late it comes."""
        return session.end + self.gap_ms + 1 + self.grace_ms


def closed_sessions(app: SessionApp, activity: Activity, partitions: int) -> tuple[dict[Span, int], list[Session]]:
    """The click counts of the sessions that closed by the last click, and the sessions still open. The
    stream time of a partition is the latest click of its users."""
    stream_time = [-1] * partitions
    for click in activity.clicks:
        partition = partition_for(click.user.encode(), partitions)
        stream_time[partition] = max(stream_time[partition], click.at)
    closed, still_open = {}, []
    for session in activity.sessions:
        if stream_time[partition_for(session.user.encode(), partitions)] >= app.closes_at(session):
            closed[(session.user, session.start, session.end)] = session.clicks
        else:
            still_open.append(session)
    return closed, still_open


def user(key: bytes) -> str:
    return key.decode()


@dataclass(frozen=True)
class Outcome:
    """A run of the demo: the sessions made, what the app sent, and what is wrong (nothing, when all is well)."""

    closed: dict[Span, int]  # the sessions that closed, with their clicks
    still_open: list[Session]
    sent: dict[Span, list[int]]
    late_counted: int
    problems: list[str]


def demo(app_yaml: Path, bootstrap: str, users: int, sessions: int, disorder: Disorder, seed: int,
         timeout_s: float) -> Outcome:  # fmt: skip
    """Produce, run, read back and check."""
    config = load_app(ROOT / app_yaml)
    app = SessionApp.of(config)
    partitions = asyncio.run(ensure_topics(bootstrap, config))
    first_ms = asyncio.run(
        start_after(bootstrap, app.input, partitions[app.input], click_time, app.gap_ms + app.grace_ms)
    )
    activity = make_activity(users, sessions, app.gap_ms, first_ms, seed, disorder)
    if reaches_past_the_clock(max(click.at for click in activity.clicks)):
        start_over(app_yaml, bootstrap, app.input, partitions[app.input])
        first_ms = a_day_ago()
        activity = make_activity(users, sessions, app.gap_ms, first_ms, seed, disorder)
    closed, still_open = closed_sessions(app, activity, partitions[app.input])
    before = asyncio.run(end_offsets(bootstrap, {app.output: partitions[app.output]}))
    asyncio.run(produce(bootstrap, app.input, (click.record() for click in activity.clicks)))
    times = [click.at for click in activity.clicks]
    print(f"produced {len(activity.clicks):,} clicks of {users:,} users in {len(activity.sessions):,} sessions "
          f"to '{app.input}' (seed {seed}), clicked {clock(min(times))} to {clock(max(times))}: "
          f"{out_of_order(times):,} came after a later click")  # fmt: skip

    code, log = run_app(app_yaml, bootstrap, timeout_s)
    if code != 0:
        print(log[-3000:], file=sys.stderr)
        return Outcome(closed, still_open, {}, 0, [f"the app exited with code {code}"])
    sent = asyncio.run(read_windows(bootstrap, before, app.output, first_ms, user))
    report(app, sent, still_open)
    late = late_counted(log)
    problems = check_windows(closed, sent, "session") + ([f"the app counted {late:,} clicks as late"] if late else [])
    return Outcome(closed, still_open, sent, late, problems)


def click_time(value: bytes) -> int:
    at: int = json.loads(value)["at"]
    return at


def out_of_order(times: Iterable[int]) -> int:
    """How many came after a later one."""
    latest, count = -1, 0
    for at in times:
        count += at < latest
        latest = max(latest, at)
    return count


def report(app: SessionApp, sent: Mapping[Span, list[int]], still_open: list[Session]) -> None:
    """What came out, and one user's sessions for a look."""
    print(f"  {app.output:<24}{len(sent):>9,} sessions of this run's clicks "
          f"({len(still_open):,} more still open: they close when later clicks come)")  # fmt: skip
    if not sent:
        return
    busiest = max(sent, key=lambda span: (sent[span][0], span))
    spans = sorted(span for span in sent if span[0] == busiest[0])
    shown = ", ".join(f"{clock(start)[11:19]} to {clock(end)[11:19]}: {sent[user, start, end][0]} click(s)"
                      for user, start, end in spans[:3])  # fmt: skip
    print(f"  e.g. {busiest[0]}: {shown}{', ...' if len(spans) > 3 else ''}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.sessions.run",
        description="Produce clicks of users who come and go, run the sessions app, check the sessions it sends.",
    )
    parser.add_argument("--users", type=int, default=500, help="users (default 500)")
    parser.add_argument("--sessions", type=int, default=4, help="sessions per user (default 4)")
    add_disorder_options(parser, delayed_share=0.1, max_delay_s=20, late=None)  # within the grace: none late

    def run(bootstrap: str, args: argparse.Namespace, disorder: Disorder, seed: int) -> list[str]:
        return demo(APP_YAML, bootstrap, args.users, args.sessions, disorder, seed, args.timeout).problems

    return run_demo(parser, argv, run, "OK: every session that closed was sent once, from its first click to its "
                                       "last, with its clicks")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
