"""Where in its partitions a command reads from, or resets an app to."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.commands.times import parse_time


@dataclass(frozen=True)
class Position:
    """A partition's beginning or end, an offset (counted back from the end when negative), or the first
    record at or after a time (milliseconds since the epoch; the end when there is none)."""

    kind: Literal["beginning", "end", "offset", "time"]
    number: int = 0


async def offsets_at(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], position: Position
) -> dict[TopicPartition, int]:
    """The offset of `position` in each partition, kept within the partition's beginning and end."""
    beginnings: dict[TopicPartition, int] = await consumer.beginning_offsets(partitions)
    ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
    offsets = dict(beginnings) if position.kind == "beginning" else dict(ends)
    if position.kind == "offset":
        offsets = {tp: position.number if position.number >= 0 else ends[tp] + position.number for tp in partitions}
    elif position.kind == "time":
        found = await consumer.offsets_for_times({tp: position.number for tp in partitions})
        offsets = {tp: ends[tp] if found[tp] is None else found[tp].offset for tp in partitions}
    return {tp: max(beginnings[tp], min(offsets[tp], ends[tp])) for tp in partitions}


def position_type(named: Mapping[str, Position], offsets: bool) -> Callable[[str], Position]:
    """An argparse type taking one of the `named` positions, an offset when `offsets`, or a time."""
    forms = ", ".join(f"'{name}'" for name in named) + (", an offset" if offsets else "")

    def parse(text: str) -> Position:
        if text in named:
            return named[text]
        if offsets and text.lstrip("-").isdigit():
            return Position("offset", int(text))
        try:
            return Position("time", parse_time(text))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"'{text}' is not {forms} or an ISO 8601 time (like 2026-01-01T10:00:00Z)"
            ) from None

    return parse
