"""`python -m runtime consume TOPIC`: a topic's records as JSON lines, decoded with its serdes."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

from processors.serdes import Serde
from runtime.commands.cluster import Cluster, CommandFailed, add_app_option, connect
from runtime.commands.json_lines import dumps, jsonable, raw_jsonable
from runtime.commands.positions import Position, offsets_at, position_type
from runtime.commands.running import command_parser, run
from runtime.commands.topic_serdes import TopicSerdes, add_serde_options, topic_serdes
from runtime.errors import EngineError

POLL_MS = 500

EPILOG = """\
Each record is one line: {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}, the
key and value decoded with the topic's serdes (bytes as {"$base64": "..."}), headers as [name, value]
pairs. A key or value its serde cannot decode is shown as its bytes, with "key_error" or "value_error".

examples:
  python -m runtime consume orders --app app.yaml                   # from the beginning to the end
  python -m runtime consume orders --app app.yaml --from -10        # the last 10 of each partition
  python -m runtime consume orders --from 2026-01-01T10:00Z --follow
"""


starting_point = position_type({"beginning": Position("beginning"), "end": Position("end")}, offsets=True)


def decoded(data: bytes | None, serde: Serde, raw: bool) -> tuple[Any, str | None]:
    """The field as JSON holds it, and why its serde could not decode it (None when it could)."""
    if data is None:
        return None, None
    if raw:
        return raw_jsonable(data), None
    try:
        return jsonable(serde.deserialize(data)), None
    except EngineError:  # not this record's fault: a schema registry out of reach
        raise
    except Exception as error:  # a user's serde may fail in any way: show the bytes and why
        return raw_jsonable(data), f"{type(error).__name__}: {error}"


def record_line(record: ConsumerRecord[bytes, bytes], serdes: TopicSerdes) -> dict[str, Any]:
    key, key_error = decoded(record.key, serdes.key, serdes.raw_key)
    value, value_error = decoded(record.value, serdes.value, serdes.raw_value)
    line = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": key,
        "value": value,
        "headers": [[name, raw_jsonable(content)] for name, content in record.headers],
    }
    if key_error is not None:
        line["key_error"] = key_error
    if value_error is not None:
        line["value_error"] = value_error
    return line


async def consume(cluster: Cluster, args: argparse.Namespace, write: Callable[[str], None]) -> int:
    count = await cluster.partitions(args.topic)
    chosen = args.partition or list(range(count))
    outside = sorted(set(chosen) - set(range(count)))
    if outside:
        raise CommandFailed(f"topic '{args.topic}' has no partition {outside[0]} (it has {count}: 0 to {count - 1})")
    serdes = topic_serdes(cluster.app, args.topic, args.key_serde, args.value_serde)
    isolation = "read_uncommitted" if args.read_uncommitted else "read_committed"
    consumer = cluster.consumer(group_id=None, isolation_level=isolation)
    await consumer.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    written = errors = 0
    try:
        partitions = [TopicPartition(args.topic, partition) for partition in sorted(set(chosen))]
        starts = await offsets_at(consumer, partitions, args.start)
        # Sought before the loop runs again: an assigned partition without a position would be reset
        # in the background, which could land after a seek made later.
        consumer.assign(partitions)
        for tp, offset in starts.items():
            consumer.seek(tp, offset)
        ends: dict[TopicPartition, int] | None = None if args.follow else await consumer.end_offsets(partitions)
        while not stop.is_set():
            if ends is not None and all([await consumer.position(tp) >= ends[tp] for tp in partitions]):
                break
            batches = await consumer.getmany(timeout_ms=POLL_MS)
            lines = []
            for tp, records in sorted(batches.items()):
                for record in records:
                    if (ends is not None and record.offset >= ends[tp]) or written == args.max_records:
                        continue
                    line = record_line(record, serdes)
                    errors += "key_error" in line or "value_error" in line
                    lines.append(dumps(line))
                    written += 1
            if lines:
                write("".join(f"{line}\n" for line in lines))
            if written == args.max_records:
                break
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await consumer.stop()
    undecoded = f" ({errors:,} not decoded)" if errors else ""
    print(f"{written:,} record{'' if written == 1 else 's'} from {args.topic}{undecoded}", file=sys.stderr)
    return 0


def _write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of at least 1")
    return int(text)


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "consume",
        "Print a topic's records as JSON lines, decoded with the topic's serdes. It joins no "
        "consumer group and commits nothing.",
        EPILOG,
    )
    parser.add_argument("topic", help="the topic to read")
    parser.add_argument(
        "--from",
        dest="start",
        type=starting_point,
        default=Position("beginning"),
        metavar="WHERE",
        help="beginning (default), end, an offset (negative: that many before the end) or an ISO 8601 time",
    )
    parser.add_argument("--follow", action="store_true", help="keep reading new records (default: stop at the end)")
    parser.add_argument("--max-records", type=_at_least_one, metavar="N", help="stop after N records")
    parser.add_argument(
        "--partition", type=int, action="append", metavar="P", help="read partition P only (repeatable)"
    )
    parser.add_argument(
        "--read-uncommitted",
        action="store_true",
        help="show records of open and aborted transactions too (default: committed records only)",
    )
    add_app_option(parser)
    add_serde_options(parser)
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return run(args.app, lambda: asyncio.run(consume(connect(args.app), args, _write_stdout)), topic_operation="Read")
