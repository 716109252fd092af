"""Checkpoints and rewind: what a checkpoint of a store of `--keys` keys costs, and how soon an app rewound
to one is processing again, against rebuilding the same state by processing its input from the beginning.

`python -m bench.rewind [--keys 1000000] [--changed 0.1] [--runs 3] [--partitions 6] [--bootstrap HOST:PORT]`

Each run: `--keys` records, one per key, into a fresh input topic; the counting app
(`bench.processors:CountPerKey`, exactly-once, a RocksDB store with a changelog, `snapshots: {location}`)
runs until it has committed them all, and `python -m runtime checkpoint` has it take a checkpoint: its
time (from the request until the checkpoint is complete, as the command waits, up to a second of which
is the workers' wait before they look for requests), the seconds the worker spent writing its partitions
(from its log), and the checkpoint's size. Then `--changed` x keys more records, of keys already counted,
are processed (the history the rewind undoes), and the app stops.

Rewound: `python -m runtime rewind --to` the checkpoint, the local state deleted (as on a new machine),
and the app started again: processing again is when the group commits past the checkpoint's offsets
(the stores restored from the checkpoint and the changelog's tail, and the first records after the
checkpoint processed); caught up when it has processed them all. The baseline, in the same run:
`python -m runtime reset --delete-state --delete-changelogs` and the app started over: it has the
checkpoint's state again once the group has committed as many records as the checkpoint covers. The
ratio is baseline / rewound, to the checkpoint's state; both catch-up times are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from bench.app import REPO_ROOT, AppSpec, RuntimeProcess, disk_usage
from bench.broker import create_topics, delete_topics, kafka
from bench.data import fill_topic
from bench.stateful import STORE, count_store
from bench.stats import median, run_directory, write_result
from bench.throughput import fresh_output, timeout_for

PARTITION_WRITTEN = re.compile(r"checkpoint \S+ of store \S+ partition \d+: \d+ rows in ([0-9.]+)s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.rewind", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--changed", type=float, default=0.1, help="records after the checkpoint, x keys")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    return parser.parse_args()


async def committed(bootstrap: str, group: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    except Exception:  # no coordinator for the group yet
        return 0
    finally:
        await admin.close()
    return sum(meta.offset for meta in offsets.values() if meta.offset >= 0)


def wait_committed(bootstrap: str, group: str, total: int, process: RuntimeProcess) -> None:
    deadline = time.monotonic() + timeout_for(total)
    while asyncio.run(committed(bootstrap, group)) < total:
        if not process.running() or time.monotonic() > deadline:
            raise RuntimeError(f"the app did not commit {total:,} records; log {process.log_path}")
        time.sleep(0.5)


def run_until(bootstrap: str, group: str, app_yaml: Path, name: str, past: int, total: int) -> tuple[float, float]:
    """Start the app `--until-caught-up` (its log `<name>.log`); seconds until the group committed more than
    `past` records, and until it is caught up (at `total`)."""
    run_yaml = app_yaml.with_name(f"{name}.yaml")
    shutil.copy(app_yaml, run_yaml)
    started = time.perf_counter()
    process = RuntimeProcess(run_yaml, "--until-caught-up")
    reached = None
    while process.running():
        if reached is None and asyncio.run(committed(bootstrap, group)) > past:
            reached = time.perf_counter() - started
        time.sleep(0.25)
    if process.wait(timeout_for(total)) != 0:
        raise RuntimeError(f"the app failed; log {process.log_path}")
    done = time.perf_counter() - started
    return (reached if reached is not None else done), done


def command(*args: str) -> float:
    """Seconds `python -m runtime ARGS` took; raises when it fails."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "runtime", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"python -m runtime {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return time.perf_counter() - started


def one_run(bootstrap: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    source = f"bench-rewind-in-{run_id}"
    asyncio.run(create_topics(bootstrap, {source: args.partitions}))
    changed = int(args.keys * args.changed)
    location, state = workdir / f"checkpoints-{run_id}", workdir / f"state-{run_id}"
    spec = AppSpec(app_id=f"bench-rewind-{run_id}", bootstrap=bootstrap, input_topic=source,
                   output_topic=asyncio.run(fresh_output(bootstrap, args.partitions)), partitions=args.partitions,
                   processor_class="bench.processors:CountPerKey", guarantee="exactly_once",
                   stores=count_store("rocksdb"),
                   extra={"snapshots": {"location": str(location)}, "state_dir": str(state)})  # fmt: skip
    app_yaml = spec.write(workdir)
    try:
        asyncio.run(fill_topic(bootstrap, source, args.keys, args.partitions, keys=args.keys))
        worker = RuntimeProcess(app_yaml)
        try:
            wait_committed(bootstrap, spec.app_id, args.keys, worker)
            started = time.perf_counter()
            asked = subprocess.run([sys.executable, "-m", "runtime", "checkpoint", str(app_yaml)], cwd=REPO_ROOT,
                                   capture_output=True, text=True, check=True)  # fmt: skip
            checkpoint_s = time.perf_counter() - started
            name = asked.stdout.strip()
            asyncio.run(fill_topic(bootstrap, source, changed, args.partitions, keys=args.keys))
            wait_committed(bootstrap, spec.app_id, args.keys + changed, worker)
        finally:
            worker.terminate()
        written = [float(found) for found in PARTITION_WRITTEN.findall(worker.log())]
        size = disk_usage(location / STORE / name).file_bytes

        rewind_command_s = command("rewind", str(app_yaml), "--to", name)
        shutil.rmtree(state, ignore_errors=True)
        ready_s, rewound_s = run_until(bootstrap, spec.app_id, app_yaml, f"{spec.app_id}-rewound", args.keys,
                                       args.keys + changed)  # fmt: skip
        ready_s += rewind_command_s
        rewound_s += rewind_command_s

        reset_s = command("reset", str(app_yaml), "--delete-state", "--delete-changelogs")
        shutil.rmtree(location, ignore_errors=True)  # from nothing: no snapshot to restore from either
        rebuilt_s, baseline_s = run_until(bootstrap, spec.app_id, app_yaml, f"{spec.app_id}-from-the-beginning",
                                          args.keys - 1, args.keys + changed)  # fmt: skip
        rebuilt_s += reset_s
        baseline_s += reset_s
    finally:
        asyncio.run(delete_topics(bootstrap, [source, spec.output_topic, f"{spec.app_id}-{STORE}-changelog",
                                              f"{spec.app_id}-rewinds"]))  # fmt: skip
        shutil.rmtree(location, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    result = {"checkpoint_s": checkpoint_s, "partition_write_s_max": max(written, default=0.0),
              "checkpoint_bytes": size, "rewind_command_s": rewind_command_s, "processing_again_s": ready_s,
              "rebuilt_from_the_beginning_s": rebuilt_s, "rewound_caught_up_s": rewound_s,
              "from_the_beginning_caught_up_s": baseline_s}  # fmt: skip
    print("  " + ", ".join(f"{key} {value:,.2f}" for key, value in result.items()), flush=True)
    return result


def main() -> None:
    args = parse_args()
    workdir = run_directory("rewind")
    with kafka(args.bootstrap) as bootstrap:
        print(f"{args.keys:,} keys, {args.changed:.0%} of them changed after the checkpoint, {args.runs} runs")
        runs = [one_run(bootstrap, args, workdir) for _ in range(args.runs)]
    medians = {key: median([run[key] for run in runs]) for key in runs[0]}
    ratio = medians["rebuilt_from_the_beginning_s"] / medians["processing_again_s"]
    caught_up_ratio = medians["from_the_beginning_caught_up_s"] / medians["rewound_caught_up_s"]
    write_result(workdir, "rewind", {"keys": args.keys, "changed": args.changed, "partitions": args.partitions,
                                     "runs": runs, "medians": medians, "ratio_to_the_checkpoint_state": ratio,
                                     "ratio_caught_up": caught_up_ratio})  # fmt: skip
    print(f"checkpoint of {args.keys:,} keys: {medians['checkpoint_s']:.2f} s (request to complete; the worker "
          f"wrote each partition in at most {medians['partition_write_s_max']:.2f} s), "
          f"{medians['checkpoint_bytes'] / 1e6:,.1f} MB")  # fmt: skip
    print(f"back to the checkpoint's state and processing again: rewound {medians['processing_again_s']:.1f} s "
          f"(the rewind command {medians['rewind_command_s']:.1f} s), from the beginning "
          f"{medians['rebuilt_from_the_beginning_s']:.1f} s: x{ratio:.1f}")  # fmt: skip
    print(f"caught up with the {args.changed:.0%} after it too: rewound {medians['rewound_caught_up_s']:.1f} s, "
          f"from the beginning {medians['from_the_beginning_caught_up_s']:.1f} s: x{caught_up_ratio:.1f}")  # fmt: skip
    print(f"results in {workdir}")


if __name__ == "__main__":
    main()
