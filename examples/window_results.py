"""The results a windowed app sent (`processors.windows:Aggregate`: key = the group key, value
`{"start", "end", "value"}`), read back, and checked against those expected: each window that closed
sent once, with its result, and no other."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

from examples.payments.run import Offsets, scan

Key = TypeVar("Key", bound=Hashable)


async def read_windows(
    bootstrap: str, start: Offsets, topic: str, first_ms: int, group_key: Callable[[bytes], Key]
) -> dict[tuple[Key, int, int], list[Any]]:
    """The results `topic` got after `start` for windows starting at `first_ms` or later, by (group key,
    start, end), each window's in the order sent; `group_key` decodes a record key (a JSON list into a
    tuple, say)."""
    sent: dict[tuple[Key, int, int], list[Any]] = {}

    def keep(key: bytes | None, value: bytes) -> None:
        result = json.loads(value)
        if result["start"] >= first_ms:
            sent.setdefault((group_key(key or b""), result["start"], result["end"]), []).append(result["value"])

    await scan(bootstrap, [tp for tp in start if tp.topic == topic], start, keep)
    return sent


def check_windows(
    expected: Mapping[tuple[Key, int, int], Any], sent: Mapping[tuple[Key, int, int], list[Any]], noun: str
) -> list[str]:
    """What is wrong with the results sent: missing, sent twice, not expected, or another result; `noun`
    names a window in the messages."""
    problems = []
    if missing := sorted(set(expected) - set(sent), key=repr):
        problems.append(f"{len(missing):,} closed {noun}s with no result sent, e.g. {missing[0]}")
    if twice := sorted((window for window, results in sent.items() if len(results) > 1), key=repr):
        problems.append(f"{len(twice):,} {noun}s sent more than once, e.g. {twice[0]}: {sent[twice[0]]}")
    if unexpected := sorted(set(sent) - set(expected), key=repr):
        problems.append(f"{len(unexpected):,} results of {noun}s that had not closed, e.g. {unexpected[0]}")
    if wrong := sorted((w for w in set(sent) & set(expected) if sent[w][0] != expected[w]), key=repr):
        got, want = sent[wrong[0]][0], expected[wrong[0]]
        problems.append(f"{len(wrong):,} {noun}s with another result, e.g. {wrong[0]}: {got}, expected {want}")
    return problems
