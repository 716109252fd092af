"""Replay by key and time: one key over a 2-hour range of a topic holding 5 days, against a scan of the
whole topic, and the built-in de-duplication's rate with many distinct ids in its window.

`python -m bench.replay [--records 10000000] [--keys 100000] [--partitions 6] [--runs 3] [--dedup-records 1000000]
[--bootstrap HOST:PORT]`

Replay: the topic's `--records` records (the benchmark data) are spread evenly over 5 days ending an hour
ago, keys `i mod --keys`; each run replays one key over 2 hours in the middle, through `runtime.replay.scan`
(the API `python -m runtime replay` uses), and times it and counts the records it read; the baseline,
in the same run, reads every partition of the topic from the beginning to the end with one consumer.
De-duplication: `--dedup-records` records with that many distinct ids (every one new: each is looked
up, then remembered) and a window that holds them all, through `python -m runtime` with one
`processors.dedup:Deduplicate` per partition, at-least-once; records per second over the processing span.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.app import RuntimeProcess
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic, make_key
from bench.stats import median, run_directory, write_result
from runtime.replay.scan import Progress as Done
from runtime.replay.scan import Replay, replay

DAY_MS = 86_400_000


def reader(bootstrap: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                            max_partition_fetch_bytes=4 << 20)  # fmt: skip


async def replay_once(bootstrap: str, topic: str, partitions: int, key: str, start_ms: int) -> tuple[float, Done]:
    """The seconds one key over 2 hours takes, start-up included, and what it did (its reading time among it)."""
    consumer = reader(bootstrap)
    started = time.perf_counter()
    await consumer.start()
    done = [Done()]
    try:
        what = Replay(topic, key.encode(), start_ms=start_ms, end_ms=start_ms + 2 * 3_600_000)
        async for _ in replay(consumer, what, partitions, lambda progress: done.__setitem__(0, progress)):
            pass
        return time.perf_counter() - started, done[0]
    finally:
        await consumer.stop()


async def scan_all(bootstrap: str, topic: str, partitions: int) -> tuple[float, int]:
    """(seconds, records read) of the whole topic, every partition from the beginning."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", max_partition_fetch_bytes=4 << 20
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        started, read = time.perf_counter(), 0
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for records in (await consumer.getmany(timeout_ms=500, max_records=50_000)).values():
                read += len(records)
        return time.perf_counter() - started, read
    finally:
        await consumer.stop()


def dedup_run(bootstrap: str, topic: str, partitions: int, records: int, workdir: Path) -> float | None:
    out = f"{topic}-unique-{uuid.uuid4().hex[:6]}"
    asyncio.run(create_topics(bootstrap, {out: partitions}))
    app = {
        "app_id": f"bench-dedup-{uuid.uuid4().hex[:8]}", "kafka": {"bootstrap_servers": bootstrap},
        "state_dir": str(workdir / "state"),
        "topics": {topic: {"partitions": partitions, "key_serde": "str", "value_serde": "msgpack"},
                   out: {"partitions": partitions, "key_serde": "str", "value_serde": "msgpack"}},
        "processors": [{"name": "dedup", "class": "processors.dedup:Deduplicate", "inputs": [topic], "outputs": [out],
                        "params": {"id": "value.id", "window_ms": 30 * DAY_MS, "output": out}}],
    }  # fmt: skip
    path = workdir / f"{app['app_id']}.yaml"
    path.write_text(yaml.safe_dump(app))
    process = RuntimeProcess(path, "--until-caught-up")
    try:
        code = process.wait(max(600.0, records / 2_000))
        if code != 0:
            raise RuntimeError(f"the runtime exited with {code}; log {process.log_path}:\n{process.log_tail()}")
        span = process.logged_span("assigned ", "caught up")
        return records / span if span else None
    finally:
        asyncio.run(delete_topics(bootstrap, [out]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dedup-records", type=int, default=1_000_000)
    parser.add_argument("--bootstrap")
    args = parser.parse_args(argv)
    workdir = run_directory("replay")
    result: dict[str, Any] = {"records": args.records, "keys": args.keys, "runs": []}
    last = time.time_ns() // 1_000_000 - 3_600_000
    first = last - 5 * DAY_MS
    spacing = (last - first) / args.records
    with kafka(args.bootstrap) as bootstrap:
        topic, dedup_topic = f"bench-replay-{uuid.uuid4().hex[:8]}", f"bench-dedup-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topics(bootstrap, {topic: args.partitions, dedup_topic: args.partitions}))
        try:
            print(f"filling {topic} with {args.records:,} records over 5 days ...", flush=True)
            asyncio.run(fill_topic(bootstrap, topic, args.records, args.partitions, args.keys,
                                   timestamp=lambda i: first + int(i * spacing)))  # fmt: skip
            asyncio.run(fill_topic(bootstrap, dedup_topic, args.dedup_records, args.partitions, args.dedup_records))
            for run in range(args.runs):
                key = make_key(run * 7919 % args.keys, args.keys)
                seconds, done = asyncio.run(replay_once(bootstrap, topic, args.partitions, key,
                                                        first + 2 * DAY_MS + run * 3_600_000))  # fmt: skip
                whole_seconds, whole = asyncio.run(scan_all(bootstrap, topic, args.partitions))
                dedup_rate = dedup_run(bootstrap, dedup_topic, args.partitions, args.dedup_records, workdir)
                scan_rate = done.scanned / done.reading_s if done.reading_s else 0.0
                measured = {"replay_s": seconds, "reading_s": done.reading_s, "scanned": done.scanned,
                            "matched": done.matched, "scan_rate": scan_rate, "whole_s": whole_seconds, "whole": whole,
                            "dedup_rate": dedup_rate}  # fmt: skip
                result["runs"].append(measured)
                print(f"run {run + 1}: replay of {key} over 2 h: {seconds:.2f} s in all, {done.scanned:,} records "
                      f"read in {done.reading_s:.2f} s ({scan_rate:,.0f}/s), {done.matched:,} matched; the whole "
                      f"topic: {whole_seconds:.1f} s for {whole:,}; dedup {dedup_rate or 0:,.0f} rec/s",
                      flush=True)  # fmt: skip
        finally:
            asyncio.run(delete_topics(bootstrap, [topic, dedup_topic]))
    names = ("replay_s", "scanned", "scan_rate", "whole_s", "dedup_rate")
    medians = result["medians"] = {name: median([run[name] or 0 for run in result["runs"]]) for name in names}
    print(f"median: replay {medians['replay_s']:.2f} s ({medians['scanned']:,.0f} read, {medians['scan_rate']:,.0f}/s) "
          f"against {medians['whole_s']:.1f} s for the whole topic ({medians['whole_s'] / medians['replay_s']:.0f}x); "
          f"dedup {medians['dedup_rate']:,.0f} rec/s")  # fmt: skip
    print(f"figures in {write_result(workdir, 'result.json', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
