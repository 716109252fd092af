"""The processor docs/windows.md shows for windows from Python does what it says: it is run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from processors import Processor, Record
from tests.support.window_context import WindowContext

DOC = Path(__file__).resolve().parents[2] / "docs" / "windows.md"


def documented(section: str, language: str) -> str:
    """The first code block of `language` in the doc's `section`."""
    text = DOC.read_text().split(f"## {section}\n", 1)[1]
    found = re.search(rf"```{language}\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"no {language} block under '## {section}'"
    return found.group(1)


def test_the_python_example_sends_each_closed_minutes_largest_payment_once() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(documented("From Python", "python"), str(DOC), "exec"), namespace)
    processor: Processor = namespace["LargestPerMinute"]()
    retention = namespace["MINUTES"].retention_ms
    assert f"retention_ms: {retention}" in documented("From Python", "yaml")
    context = WindowContext({}, {"largest": {"kind": "window", "retention_ms": retention}})
    processor.init(context)
    payments = [  # (account, timestamp, amount): the minute [0, 60 s) closes at 70 s
        ("a", 1_000, 5), ("b", 2_000, 7), ("a", 59_000, 9), ("a", 61_000, 1), ("a", 30_000, 20),
        ("b", 69_000, 3), ("a", 70_000, 4), ("a", 50_000, 100), ("b", 200_000, 1),
    ]  # fmt: skip
    for offset, (account, timestamp, amount) in enumerate(payments):
        processor.process(Record("payments", 0, offset, timestamp, account, {"amount_minor": amount}), context)
    assert [(sent.key, sent.value) for sent in context.taken("largest-per-minute")] == [
        ("a", {"start": 0, "largest": 20}),  # at 70 s; the payment at 50 s came after: late
        ("b", {"start": 0, "largest": 7}),
        ("a", {"start": 60_000, "largest": 4}),  # at 200 s
        ("b", {"start": 60_000, "largest": 3}),
    ]
    assert context.counts == {"late_records": 1}
