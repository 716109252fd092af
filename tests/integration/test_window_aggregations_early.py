"""Several aggregations of a window and its early results, in one app against a real broker: each window's
results, early ones marked, then its final one once, with every aggregation by name."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest

from tests.conftest import TopicNamer
from tests.integration.test_windows import produce_timed, run_until_caught_up
from tests.support.kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.anyio


async def test_several_aggregations_come_early_every_3_records_and_every_500_ms_then_final_once(
    kafka_bootstrap: str, topic_name: TopicNamer, tmp_path: Path
) -> None:
    source, results = topic_name("in"), topic_name("out")
    for topic in (source, results):
        await create_topic(kafka_bootstrap, topic)
    app: dict[str, Any] = {
        "app_id": topic_name("app"),
        "topics": {topic: {"key_serde": "str"} for topic in (source, results)},
        "processors": [{"name": "windows", "class": "processors.windows:Aggregate", "inputs": [source],
                        "outputs": [results],
                        "params": {"window": {"type": "tumbling", "size_ms": 1000},
                                   "aggregations": {"total": {"type": "sum", "field": "n"}, "n": {"type": "count"}},
                                   "early": {"every_records": 3, "every_ms": 500}, "output": results}}],
        "state_dir": str(tmp_path / "state"),
    }  # fmt: skip
    base = (int(time.time() * 1000) - 600_000) // 1000 * 1000  # recent enough for the broker's checks
    arrivals = [("a", 0, 1), ("a", 100, 2), ("a", 200, 3), ("b", 300, 4), ("a", 600, 5), ("b", 1100, 6),
                ("c", 2600, 7)]  # fmt: skip
    await produce_timed(kafka_bootstrap, source, [(key, base + at, n) for key, at, n in arrivals])
    await run_until_caught_up(app, kafka_bootstrap)

    sent = []
    for record in await read_topic(kafka_bootstrap, results, "read_committed"):
        value = msgpack.unpackb(record.value)
        total_and_n = (value["value"]["total"], value["value"]["n"])
        sent.append((record.key.decode(), value["start"] - base, total_and_n, value.get("early", False)))
    assert Counter(sent) == Counter(
        [
            ("a", 0, (6, 3), True),  # its third record
            ("b", 0, (4, 1), True),  # stream time crossed base + 500, with the record at 600
            ("a", 0, (11, 4), True),
            ("a", 0, (11, 4), False),  # closed by the record at 1100
            ("b", 0, (4, 1), False),
            ("b", 1000, (6, 1), True),  # stream time crossed base + 1000
            ("b", 1000, (6, 1), False),  # closed by the record at 2600, which crossed base + 2500
            ("c", 2000, (7, 1), True),
        ]
    )
    for position, (key, start, _, early) in enumerate(sent):  # a window's final result is its last
        assert early or (key, start) not in {(later, at) for later, at, _, _ in sent[position + 1 :]}
