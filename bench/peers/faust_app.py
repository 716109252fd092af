"""The Faust peer: one workload of `bench.peers` as a faust-streaming agent, written as Faust's docs show it,
in its own virtualenv (`requirements/faust.txt`: faust-streaming with its `fast`, `uvloop` and
`rocksdict` extras).

`python -m bench.peers.faust_app` with `bench.peers.peer_args`' command line; it runs the Faust worker
(uvloop, no web server) with Faust's defaults but for what `settings` names (and, for the await workload,
the agent's `concurrency`). It stops itself with SIGTERM, Faust's graceful shutdown (producer flushed,
offsets committed), once it has sent the outputs
the benchmark expects; the window workload once it has read the whole input and its table's cleanup
has closed every window.

Faust closes a window when the wall clock, not the stream's time, is past the window's end plus its
`expires` (`Collection._del_old_keys` compares with `time.time()`): on an input whose timestamps all
lie in the past, every cleanup closes every window it holds, however few of its records were read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from datetime import timedelta
from typing import Any

import faust  # type: ignore[import-not-found]

from bench.peers.peer_args import AWAIT_IN_FLIGHT, AWAIT_MS, announce, parse

WINDOW = timedelta(minutes=1)
CHECK_DONE_EVERY = 0.5  # seconds, the window workload's check whether every window closed


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `faust.App` settings besides the run's own broker, app id and data directory."""
    return {
        "store": "rocksdb://",
        "processing_guarantee": args.guarantee,
        "topic_partitions": args.partitions,
        "consumer_auto_offset_reset": "earliest",
        "web_enabled": False,
    }


class Progress:
    """The records read and sent, and the stop once the work is done (after `outputs` sent, unless None)."""

    def __init__(self, records: int, outputs: int | None) -> None:
        self.records = records
        self.outputs = outputs
        self.read = 0
        self.sent = 0
        self.stopping = False

    def stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            os.kill(os.getpid(), signal.SIGTERM)

    def sent_one(self) -> None:
        self.sent += 1
        if self.sent == self.outputs:
            self.stop()


def main() -> None:
    args = parse(__doc__ or "")
    chosen = settings(args)
    # The await agent's `concurrency` is an option of the agent, not of the app: announced with the app's.
    announce({**chosen, "concurrency": AWAIT_IN_FLIGHT} if args.workload == "await" else chosen)
    app = faust.App(args.group, broker=f"kafka://{args.bootstrap}", datadir=args.state_dir, **chosen)
    source = app.topic(args.input, key_type=str, key_serializer="raw", value_serializer="json")
    sink = app.topic(args.output, key_type=str, key_serializer="raw", value_serializer="json")
    # Faust's windows close by the wall clock, so how many results it sends is not known beforehand.
    progress = Progress(args.records, None if args.workload == "window" else args.outputs)

    if args.workload == "transform":

        @app.agent(source)  # type: ignore[untyped-decorator]
        async def transform(stream: Any) -> None:
            async for key, value in stream.items():
                value["seen"] = True
                await sink.send(key=key, value=value)
                progress.sent_one()

    elif args.workload == "await":
        # `concurrency` actors of the agent share the stream's queue (Faust's documented agent option): each
        # awaits its own record, so up to that many wait at once, in no order.
        @app.agent(source, concurrency=AWAIT_IN_FLIGHT)  # type: ignore[untyped-decorator]
        async def lookup(stream: Any) -> None:
            async for key, value in stream.items():
                await asyncio.sleep(AWAIT_MS / 1000)
                value["seen"] = True
                await sink.send(key=key, value=value)
                progress.sent_one()

    elif args.workload == "count":
        counts = app.Table("counts", default=int)

        @app.agent(source)  # type: ignore[untyped-decorator]
        async def count(stream: Any) -> None:
            async for key, _value in stream.items():
                counts[key] += 1
                await sink.send(key=key, value={"key": key, "count": counts[key]})
                progress.sent_one()

    else:

        async def window_closed(window_key: Any, count: int) -> None:
            key, (start, _end) = window_key
            start_ms = round(start * 1000)
            end_ms = start_ms + int(WINDOW.total_seconds() * 1000)
            await sink.send(key=key, value={"start": start_ms, "end": end_ms, "count": count})
            progress.sent_one()

        table = app.Table("window-counts", default=int, on_window_close=window_closed)
        window_counts = table.tumbling(WINDOW, expires=WINDOW).relative_to_stream()

        @app.agent(source)  # type: ignore[untyped-decorator]
        async def count_windows(stream: Any) -> None:
            async for key, _value in stream.items():
                window_counts[key] += 1
                progress.read += 1

        @app.timer(CHECK_DONE_EVERY)  # type: ignore[untyped-decorator]
        async def every_window_closed() -> None:
            if progress.read >= progress.records and not any(True for _ in table.data):
                progress.stop()

    sys.argv = [sys.argv[0], "--loop", "uvloop", "worker", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main()
