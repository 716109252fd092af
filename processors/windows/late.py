"""What a late record carries to the late-records topic: its own key, value and headers, and headers
saying where it came from and why it was late."""

from __future__ import annotations

from processors.record import Record

LATE_REASON = "late.reason"
LATE_STREAM_TIME = "late.stream_time"


def late_headers(record: Record, reason: str, stream_time: int) -> list[tuple[str, bytes]]:
    return [
        *record.headers,
        ("source.topic", record.topic.encode()),
        ("source.partition", str(record.partition).encode()),
        ("source.offset", str(record.offset).encode()),
        ("source.timestamp", str(record.timestamp).encode()),
        (LATE_REASON, reason.encode()),
        (LATE_STREAM_TIME, str(stream_time).encode()),
    ]
