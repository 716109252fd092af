"""`python -m runtime produce TOPIC`: JSON lines from stdin or a file, each one record, encoded with
the topic's serdes."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from aiokafka.errors import KafkaError

from processors.serdes import Serde
from runtime.commands.cluster import Cluster, CommandFailed, add_app_option, connect
from runtime.commands.json_lines import from_jsonable, raw_bytes
from runtime.commands.running import command_parser, run
from runtime.commands.topic_serdes import TopicSerdes, add_serde_options, topic_serdes
from runtime.errors import EngineError

FIELDS = ("key", "value", "headers", "timestamp", "partition")
READ_SIZE = 1 << 16
# Acknowledgements are checked every this many records, so a failure stops the input early.
CHECK_EVERY = 10_000

EPILOG = """\
Each line is a JSON object with any of: key, value, headers ({"name": "text"} or [["name", "text"], ...]),
timestamp (milliseconds since the epoch) and partition (else the key's partition, as Kafka's producer
chooses it). Keys and values are encoded with the topic's serdes; bytes are written {"$base64": "..."}.

examples:
  echo '{"key": "k1", "value": {"n": 1}}' | python -m runtime produce orders --app app.yaml
  python generate.py | python -m runtime produce orders --app app.yaml --rate 100
  python -m runtime produce orders --file orders.jsonl --value-serde json
"""


@dataclass(frozen=True)
class OutgoingRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    timestamp_ms: int | None
    partition: int | None


def parse_record(line: bytes, serdes: TopicSerdes, partitions: int) -> OutgoingRecord:
    """One line as a record; a ValueError names what is wrong with it."""
    try:
        fields = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None
    if not isinstance(fields, dict):
        raise ValueError(f"expected a JSON object with any of {', '.join(FIELDS)}")
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field '{unknown[0]}' (a line holds any of {', '.join(FIELDS)})")
    return OutgoingRecord(
        _encoded(fields.get("key"), serdes.key, serdes.raw_key, "key"),
        _encoded(fields.get("value"), serdes.value, serdes.raw_value, "value"),
        _headers(fields.get("headers")),
        _whole_number(fields.get("timestamp"), "timestamp", 0, None),
        _whole_number(fields.get("partition"), "partition", 0, partitions - 1),
    )


def _encoded(field: Any, serde: Serde, raw: bool, what: str) -> bytes | None:
    if field is None:
        return None
    if raw:
        return raw_bytes(field, f"the {what}")
    value = from_jsonable(field)
    try:
        return serde.serialize(value)
    except EngineError:  # not this line's fault: a schema registry out of reach, or refusing the schema
        raise
    except Exception as error:  # a user's serde may fail in any way: name the field
        message = f"{type(error).__name__}: {error}"
        raise ValueError(f"the {what} cannot be encoded with the topic's {what} serde: {message}") from None


def _headers(field: Any) -> list[tuple[str, bytes]] | None:
    if field is None:
        return None
    pairs = [list(pair) for pair in field.items()] if isinstance(field, dict) else field
    if not isinstance(pairs, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
        raise ValueError('headers must be {"name": "text", ...} or [["name", "text"], ...]')
    for name, _ in pairs:
        if not isinstance(name, str):
            raise ValueError(f"a header's name must be text, not {orjson.dumps(name).decode()}")
    return [(name, raw_bytes(value, f"header '{name}'")) for name, value in pairs]


def _whole_number(field: Any, what: str, least: int, most: int | None) -> int | None:
    if field is None:
        return None
    if isinstance(field, bool) or not isinstance(field, int) or field < least or (most is not None and field > most):
        bounds = f"{least} to {most}" if most is not None else f"at least {least}"
        raise ValueError(f"{what} must be a whole number, {bounds}, not {orjson.dumps(field).decode()}")
    return field


async def numbered_lines(source: BinaryIO) -> AsyncIterator[tuple[int, bytes]]:
    """The source's non-blank lines as they arrive: a generator's line is sent at once, not when a
    buffer fills (each read returns what the pipe holds)."""
    number, pending = 0, b""
    while chunk := await asyncio.to_thread(os.read, source.fileno(), READ_SIZE):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            number += 1
            if line.strip():
                yield number, line
    if pending.strip():
        yield number + 1, pending


async def produce(cluster: Cluster, args: argparse.Namespace, source: BinaryIO, source_name: str) -> int:
    partitions = await cluster.partitions(args.topic)
    serdes = topic_serdes(cluster.app, args.topic, args.key_serde, args.value_serde)
    producer = cluster.producer()
    await producer.start()
    loop = asyncio.get_running_loop()
    next_at, sent = loop.time(), 0  # with --rate: when the next record may go
    acknowledgements: list[asyncio.Future[Any]] = []
    try:
        async for number, line in numbered_lines(source):
            try:
                record = parse_record(line, serdes, partitions)
            except ValueError as error:
                raise CommandFailed(f"{source_name}, line {number}: {error}; {_produced_before(sent)}") from None
            if args.rate is not None:
                next_at = await _paced(loop, next_at, 1 / args.rate)
            try:
                acknowledgements.append(
                    await producer.send(
                        args.topic, record.value, record.key, record.partition, record.timestamp_ms, record.headers
                    )
                )
            except KafkaError as error:
                message = f"Kafka refused the record: {error}; {_produced_before(sent)}"
                raise CommandFailed(f"{source_name}, line {number}: {message}") from None
            sent += 1
            if len(acknowledgements) >= CHECK_EVERY:
                await asyncio.gather(*acknowledgements)
                acknowledgements.clear()
        await asyncio.gather(*acknowledgements)
    finally:
        await producer.stop()
    print(f"produced {_records(sent)} to {args.topic}", file=sys.stderr)
    return 0


async def _paced(loop: asyncio.AbstractEventLoop, due: float, interval: float) -> float:
    """Waits until `due`; returns when the record after this one is due. A record that comes later than
    its turn (the input paused) starts the pace anew from now: a pause earns no burst above the rate."""
    now = loop.time()
    if due > now:
        await asyncio.sleep(due - now)
        return due + interval
    return now + interval


def _records(count: int) -> str:
    return f"{count:,} record{'' if count == 1 else 's'}"


def _produced_before(count: int) -> str:
    if count == 0:
        return "nothing was produced"
    return "the record before it was produced" if count == 1 else f"the {count:,} records before it were produced"


def _positive(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = 0.0
    if not rate > 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number of records per second")
    return rate


def parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "produce",
        "Write records to a topic from JSON lines, encoded with the topic's serdes.",
        EPILOG,
    )
    parser.add_argument("topic", help="the topic to write to")
    parser.add_argument("--file", type=Path, help="read the lines from this file (default: stdin)")
    parser.add_argument("--rate", type=_positive, metavar="N", help="at most N records per second")
    add_app_option(parser)
    add_serde_options(parser)
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        cluster = connect(args.app)
        if args.file is None:
            return asyncio.run(produce(cluster, args, sys.stdin.buffer, "stdin"))
        try:
            source = args.file.open("rb")
        except OSError as error:
            raise CommandFailed(f"cannot read {args.file}: {error.strerror}") from None
        with source:
            return asyncio.run(produce(cluster, args, source, str(args.file)))

    return run(args.app, body, topic_operation="Write")
