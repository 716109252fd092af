"""De-duplication over a long run: the ids its store holds level off at two windows' worth, however many
records pass, because ids older than that leave it as stream time moves on.

`python -m bench.dedup_soak [--records 3000000] [--window-ms 60000] [--every 250000]`

Through the test kit's driver (no broker: the processor, its RocksDB store with a TTL and its changelog are the
runtime's own): one partition, every record a new id, a millisecond apart, so a window holds `--window-ms`
ids. Every `--every` records it prints the ids the store holds. (Not the process's memory: the driver keeps
every record of its topics, as a broker would, so that grows with the run whatever the store does.)
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import Any

from bench.stats import run_directory, write_result
from runtime.testkit import AppDriver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedup_soak", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--window-ms", type=int, default=60_000)
    parser.add_argument("--every", type=int, default=250_000)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    topic = {"partitions": 1, "key_serde": "str", "value_serde": "msgpack"}
    app = {"app_id": "soak", "topics": {"events": topic, "unique": topic},
           "processors": [{"name": "dedup", "class": "processors.dedup:Deduplicate", "inputs": ["events"],
                           "outputs": ["unique"],
                           "params": {"id": "key", "window_ms": args.window_ms, "output": "unique"}}]}  # fmt: skip
    samples: list[dict[str, Any]] = []
    start = 1_790_000_000_000
    with tempfile.TemporaryDirectory() as state, AppDriver(app, state_dir=Path(state)) as driver:
        seen = driver.store("dedup-seen")
        for done in range(0, args.records, args.every):
            batch = range(done, min(done + args.every, args.records))
            driver.pipe_bytes_all("events", ((f"id-{n}".encode(), b"\x80", start + n) for n in batch))
            held = sum(1 for _ in seen.range())
            samples.append({"records": batch.stop, "ids_held": held})
            print(f"{batch.stop:>10,} records: {held:>8,} ids held", flush=True)
    print(f"figures in {write_result(run_directory('dedup-soak'), 'result.json', {'samples': samples})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
