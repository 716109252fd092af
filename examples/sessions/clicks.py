"""User activity for the sessions example: each user's clicks come in sessions, the clicks of a session
less than the inactivity gap apart and the sessions more than the gap apart, so the sessions the app
must find are known before it runs. Values are JSON `{"user", "page", "at"}` keyed by the user.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from examples.disorder import Disorder, in_arrival_order

PAGES = ("home", "search", "product", "product", "product", "cart", "checkout", "help")
MAX_CLICKS = 12  # per session


@dataclass(frozen=True)
class Click:
    user: str
    page: str
    at: int  # epoch ms

    def record(self) -> tuple[bytes, bytes]:
        return self.user.encode(), json.dumps({"user": self.user, "page": self.page, "at": self.at}).encode()


@dataclass(frozen=True)
class Session:
    """A session as it was made: its user, first and last click, and how many clicks."""

    user: str
    start: int
    end: int
    clicks: int


@dataclass(frozen=True)
class Activity:
    clicks: list[Click]  # in the order they reach Kafka
    sessions: list[Session]


def make_activity(
    users: int, sessions: int, gap_ms: int, start_ms: int, seed: int, disorder: Disorder | None = None
) -> Activity:
    """`sessions` sessions of each of `users` users, from `start_ms` on: 1 to `MAX_CLICKS` clicks each,
    up to `gap_ms` apart, then a pause longer than `gap_ms` (up to four times that). With `disorder`, a
    share of the clicks reach Kafka after later ones."""
    rng = random.Random(seed)
    made: list[Click] = []
    planned: list[Session] = []
    for number in range(users):
        user, at = f"user-{number:04d}", start_ms + rng.randrange(gap_ms)  # users start at different times
        for _ in range(sessions):
            first, clicks = at, rng.randint(1, MAX_CLICKS)
            for index in range(clicks):
                at += rng.randint(1_000, gap_ms) if index else 0
                made.append(Click(user, rng.choice(PAGES), at))
            planned.append(Session(user, first, at, clicks))
            at += gap_ms + rng.randint(1, 3 * gap_ms)
    made.sort(key=lambda click: click.at)
    if disorder is None:
        return Activity(made, planned)
    arrived = in_arrival_order(((click.at, click) for click in made), disorder, random.Random(f"disorder-{seed}"))
    return Activity(list(arrived), planned)
