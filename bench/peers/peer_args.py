"""The command line of every peer's app (Kafka Streams' takes the same), how it reports its settings, and the
`await` workload's figures, which the runtime's app and Faust's share.

Imported by the apps inside the peers' own virtualenvs: the standard library only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

SETTINGS_PREFIX = "peer settings: "

AWAIT_MS = 10  # what each record of the `await` workload awaits (`asyncio.sleep`), as a 10 ms call would
# Its records in flight at once: the runtime's `max_in_flight` (per task: per partition), Faust's agent `concurrency`
# (per worker: one here).
AWAIT_IN_FLIGHT = 1000


def parse(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True, help="consumer group, application id")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--workload", required=True, choices=["transform", "count", "window", "await"])
    parser.add_argument("--guarantee", required=True, choices=["at_least_once", "exactly_once"])
    parser.add_argument("--partitions", type=int, required=True, help="of the input topic")
    parser.add_argument("--records", type=int, required=True, help="in the input")
    parser.add_argument("--outputs", type=int, required=True, help="stop once this many outputs are sent")
    return parser.parse_args()


def announce(settings: dict[str, Any]) -> None:
    """Print the settings the app runs with, for the benchmark's result (one line, read from the log)."""
    print(SETTINGS_PREFIX + json.dumps(settings, default=str), flush=True)
