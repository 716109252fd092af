"""`python -m runtime replay TOPIC --key KEY --from TIME --to TIME`: one key's records in a time range."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from runtime.commands.cluster import Cluster, CommandFailed, add_app_option, connect
from runtime.commands.consume import record_line
from runtime.commands.json_lines import dumps
from runtime.commands.running import command_parser, run
from runtime.commands.times import parse_time
from runtime.commands.topic_serdes import TopicSerdes, add_serde_options, declared_serdes, topic_serdes
from runtime.replay.partitioners import DEFAULT, PARTITIONERS, elsewhere
from runtime.replay.scan import Progress as Done
from runtime.replay.scan import RangeGone, Replay, replay
from stores.text_keys import KeyNotEncodable, encoded_key

EPILOG = """\
The key's partition is the one its producer chose for its bytes (the topic's key serde encodes KEY; a JSON
or msgpack key is given as JSON): Kafka's default, murmur2, as Java's producer and aiokafka choose it, or
another of librdkafka's partitioners with --partitioner (confluent-kafka and the other librdkafka clients
default to consistent_random, a CRC32 of the key). Only that partition is read, from the first record at or
after --from, up to the first record at or after --to (or the end of the partition when the command
started). Records go to standard output as JSON lines (as `consume` prints them), to --output FILE, or to
--to-topic TOPIC, keys, values and headers as they were (encoded again when the YAML gives that topic
other serdes). A progress bar on standard error counts the records read and those that matched. When the
partition holds no record of the key in the range, one line says so, and where the other partitioners put it.

examples:
  python -m runtime replay activity --app app.yaml --key acc-0042 --from 2026-11-20T10:00Z --to 2026-11-20T12:00Z
  python -m runtime replay activity --key acc-0042 --partitioner consistent_random --from 2026-11-20
  python -m runtime replay activity --partition 3 --from 2026-11-20 --output day.jsonl
"""


async def replay_command(cluster: Cluster, args: argparse.Namespace, out: TextIO) -> int:
    partitions = await cluster.partitions(args.topic)
    serdes = topic_serdes(cluster.app, args.topic, args.key_serde, args.value_serde)
    try:
        key = None if args.key is None else encoded_key(serdes.key, serdes.raw_key, args.key)
    except KeyNotEncodable as error:
        raise CommandFailed(str(error)) from None
    what = Replay(args.topic, key, args.partition, args.start, args.end, args.partitioner)
    try:
        partition = what.partition_of(partitions)
    except ValueError as error:
        raise CommandFailed(str(error)) from None
    write = await _writer(cluster, args, serdes, out)
    consumer = cluster.consumer(group_id=None, isolation_level="read_committed")
    await consumer.start()
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[matched]:,} matched"),
        transient=True,
        disable=args.no_progress,
        console=None,
    )
    task = bar.add_task(f"{args.topic}[{partition}]", total=None, matched=0)

    def show(done: Done) -> None:
        bar.update(task, completed=done.scanned, total=max(done.end - done.first, done.scanned), matched=done.matched)

    matched = 0
    try:
        with bar:
            async for record in replay(consumer, what, partitions, show):
                await write(record)
                matched += 1
    except RangeGone as error:
        raise CommandFailed(str(error)) from None
    finally:
        await consumer.stop()
        await write(None)
    if matched == 0 and key is not None:
        print(not_found(args, key, partitions, partition), file=sys.stderr)
    else:
        print(f"{matched:,} record{'' if matched == 1 else 's'} from {args.topic}[{partition}]", file=sys.stderr)
    return 0


def not_found(args: argparse.Namespace, key: bytes, partitions: int, partition: int) -> str:
    """No record of the key where its partitioner puts it: where the other partitioners would have."""
    where = f"no record of key {args.key!r} in {args.topic}[{partition}]"
    if args.start is not None or args.end is not None:
        where += " in the range"
    others = elsewhere(key, partitions, args.partitioner)
    if not others:
        return f"{where}, where every partitioner puts it"
    tries = "; ".join(
        f"{' or '.join(f'--partitioner {name}' for name in names)} reads partition {other}"
        for other, names in sorted(others.items())
    )
    return f"{where}, where {args.partitioner} puts it; if its producer used another partitioner: {tries}"


async def _writer(cluster: Cluster, args: argparse.Namespace, serdes: TopicSerdes, out: TextIO) -> Callable[[Any], Any]:
    """Where records go: JSON lines to `out` or a file, or a topic. Called with None at the end."""
    if args.to_topic is None:
        sink = out if args.output is None else args.output.open("w")

        async def to_lines(record: Any) -> None:
            if record is None:
                sink.flush()
                if sink is not out:
                    sink.close()
                return
            sink.write(dumps(record_line(record, serdes)) + "\n")

        return to_lines
    target = topic_serdes(cluster.app, args.to_topic, None, None)
    same = declared_serdes(cluster.app, args.to_topic) == declared_serdes(cluster.app, args.topic)
    producer = cluster.producer()
    await producer.start()

    async def to_topic(record: Any) -> None:
        if record is None:
            await producer.stop()
            return
        key, value = record.key, record.value
        if not same:
            key = None if key is None else target.key.serialize(serdes.key.deserialize(key))
            value = None if value is None else target.value.serialize(serdes.value.deserialize(value))
        await producer.send(args.to_topic, value, key=key, headers=list(record.headers), timestamp_ms=record.timestamp)

    return to_topic


def parser() -> argparse.ArgumentParser:
    parser = command_parser("replay", "Replay one key's records (or one partition's) in a time range.", EPILOG)
    parser.add_argument("topic", help="the topic to read")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="the key: its partition is read, and only its records are kept")
    which.add_argument("--partition", type=int, metavar="P", help="every record of partition P in the range")
    parser.add_argument(
        "--partitioner",
        choices=list(PARTITIONERS),
        default=DEFAULT,
        help="with --key: how its producer chose the partition, by librdkafka's names (default murmur2_random, "
        "as Java's producer; librdkafka's clients default to consistent_random)",
    )
    parser.add_argument(
        "--from", dest="start", type=parse_time, metavar="TIME", help="ISO 8601 (default: the beginning)"
    )
    parser.add_argument(
        "--to", dest="end", type=parse_time, metavar="TIME", help="ISO 8601, not included (default: the end)"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--output", type=Path, metavar="FILE", help="write the JSON lines to FILE")
    where.add_argument("--to-topic", metavar="TOPIC", help="produce the records to TOPIC")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_app_option(parser)
    add_serde_options(parser)
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.start is not None and args.end is not None and args.end <= args.start:
        print("error: --to must come after --from", file=sys.stderr)
        return 2
    if args.partition is not None and args.partitioner != DEFAULT:
        print("error: --partitioner places a --key; --partition names the partition itself", file=sys.stderr)
        return 2
    return run(
        args.app,
        lambda: asyncio.run(replay_command(connect(args.app, start_local_broker=False), args, sys.stdout)),
        topic_operation="Read",
    )
