"""Events that reach Kafka out of order: a share of them held back for a while (a phone offline, a batch
upload, a retry), so that they arrive after events that happened later, and a few held back so long
that their windows have closed when they come (late).

The examples' generators make their events in time order; `in_arrival_order` turns that into the
order they are produced in.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

Event = TypeVar("Event")


@dataclass(frozen=True)
class Disorder:
    """How long events take to arrive after they happened: a `delayed_share` of them up to
    `max_delay_ms` (out of order, but on time for a window whose grace period is at least that long),
    a `late_share` of them between `late_delay_ms` and twice that (past the grace period, when that
    exceeds the window's size plus its grace), the rest at once."""

    delayed_share: float = 0.0
    max_delay_ms: int = 0
    late_share: float = 0.0
    late_delay_ms: int = 0

    def __post_init__(self) -> None:
        if min(self.delayed_share, self.late_share) < 0 or self.delayed_share + self.late_share > 1:
            raise ValueError("the delayed and late shares must be 0 or more and add up to at most 1")
        if self.max_delay_ms < 0 or self.late_delay_ms < 0:
            raise ValueError("delays must be 0 or more")

    def delay(self, rng: random.Random) -> int:
        draw = rng.random()
        if draw < self.late_share:
            return self.late_delay_ms + rng.randrange(self.late_delay_ms + 1)
        if draw < self.late_share + self.delayed_share:
            return rng.randrange(self.max_delay_ms + 1)
        return 0


def in_arrival_order(events: Iterable[tuple[int, Event]], disorder: Disorder, rng: random.Random) -> Iterator[Event]:
    """`events`, (time, event) in time order, in the order they arrive: by time plus their delay, ties
    in time order. Lazy: it holds only the events still on their way."""
    on_the_way: list[tuple[int, int, Event]] = []
    for sequence, (time, event) in enumerate(events):
        while on_the_way and on_the_way[0][0] <= time:  # arrived before this one happened
            yield heapq.heappop(on_the_way)[2]
        heapq.heappush(on_the_way, (time + disorder.delay(rng), sequence, event))
    while on_the_way:
        yield heapq.heappop(on_the_way)[2]


def add_disorder_options(
    parser: argparse.ArgumentParser, delayed_share: float, max_delay_s: float, late: tuple[float, float] | None
) -> None:
    """`--delayed-share` and `--max-delay-s`, and with `late` (its defaults) `--late-share` and `--late-delay-s`."""
    parser.add_argument("--delayed-share", type=float, default=delayed_share,
                        help=f"share held back, out of order (default {delayed_share:g}) ...")  # fmt: skip
    parser.add_argument("--max-delay-s", type=float, default=max_delay_s,
                        help=f"... by up to this many seconds (default {max_delay_s:g})")  # fmt: skip
    if late is not None:
        parser.add_argument("--late-share", type=float, default=late[0],
                            help=f"share held back past a window's grace (default {late[0]:g}) ...")  # fmt: skip
        parser.add_argument("--late-delay-s", type=float, default=late[1],
                            help=f"... by this many seconds to twice that (default {late[1]:g})")  # fmt: skip


def disorder_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Disorder:
    """The `Disorder` the options of `add_disorder_options` ask for; a parser error if it cannot be."""
    options = vars(args)
    try:
        return Disorder(
            options["delayed_share"],
            round(options["max_delay_s"] * 1000),
            options.get("late_share", 0.0),
            round(options.get("late_delay_s", 0.0) * 1000),
        )
    except ValueError as error:
        parser.error(str(error))
