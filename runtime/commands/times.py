"""Points in time on the command line: ISO 8601, UTC unless the text names its offset."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, as Kafka's timestamps count, of `2026-01-01` or `2026-01-01T10:00:00+02:00`."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a time: write it in ISO 8601, like 2026-01-01T10:00:00Z (UTC unless an offset is given)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)
