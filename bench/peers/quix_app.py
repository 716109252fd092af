"""The Quix Streams peer: one workload of `bench.peers` as a StreamingDataFrame, written as Quix Streams' docs
show it, in its own virtualenv (`requirements/quix.txt`).

`python -m bench.peers.quix_app` with `bench.peers.peer_args`' command line. Quix Streams' defaults
but for what `settings` names; `Application.run(count=...)` stops it once that many outputs are out,
with a last checkpoint commit.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from quixstreams import Application  # type: ignore[import-not-found]

from bench.peers.peer_args import announce, parse


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `Application` settings besides the run's own broker, group and state directory."""
    return {
        "auto_offset_reset": "earliest",
        "processing_guarantee": "exactly-once" if args.guarantee == "exactly_once" else "at-least-once",
    }


def count_per_key(value: dict[str, Any], key: str, timestamp: int, headers: Any, state: Any) -> dict[str, Any]:
    """The docs' stateful `apply`: the state is the message key's own."""
    count: int = state.get("count", 0) + 1
    state.set("count", count)
    return {"key": key, "count": count}


def window_result(window: dict[str, Any]) -> dict[str, Any]:
    return {"start": window["start"], "end": window["end"], "count": window["value"]}


def main() -> None:
    args = parse(__doc__ or "")
    chosen = settings(args)
    announce(chosen)
    app = Application(broker_address=args.bootstrap, consumer_group=args.group, state_dir=args.state_dir, **chosen)
    source = app.topic(args.input, key_deserializer="str", value_deserializer="json")
    sink = app.topic(args.output, key_serializer="str", value_serializer="json")
    sdf = app.dataframe(source)
    if args.workload == "transform":
        sdf["seen"] = True
    elif args.workload == "count":
        sdf = sdf.apply(count_per_key, stateful=True, metadata=True)
    else:
        sdf = sdf.tumbling_window(timedelta(minutes=1)).count().final().apply(window_result)
    sdf.to_topic(sink)
    app.run(count=args.outputs, collect=False)


if __name__ == "__main__":
    main()
