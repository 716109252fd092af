"""`python -m runtime replay-jobs serve | request | list`: run replay jobs, ask for one, see where they stand."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import uuid
from typing import Any

from aiokafka import TopicPartition
from rich.console import Console
from rich.table import Table

from runtime.commands.cluster import Cluster, CommandFailed, add_app_option, connect
from runtime.commands.running import command_parser, run
from runtime.commands.times import parse_time
from runtime.config import AppConfig
from runtime.console import configure_logging, log_format_from_environment
from runtime.kafka.connection import Clients
from runtime.log_fields import LOG_FIELDS, LOG_FORMATS
from runtime.replay.jobs.service import ReplayService, create_job_topics
from runtime.replay.jobs.state import JobState, ReplayRequest, Status
from runtime.replay.partitioners import DEFAULT, PARTITIONERS

EPILOG = """\
The app YAML's `replay_jobs` section names the requests topic and the jobs topic (default
<app_id>-replay-requests and <app_id>-replay-jobs) and how many jobs a worker runs at once. Start
`serve` in as many processes as you like: they share the requests, and a job whose worker dies is
taken over by another after `takeover_after_ms`, from the offset it reached. A job's records reach
its target in transactions: read it with isolation_level read_committed.

examples:
  python -m runtime replay-jobs serve --app app.yaml
  python -m runtime replay-jobs request activity --app app.yaml --key acc-0042 \\
      --from 2026-11-20T10:00Z --to 2026-11-20T12:00Z --to-topic activity-replays --wait
  python -m runtime replay-jobs request activity --app app.yaml --key acc-0042 \\
      --partitioner consistent_random --to-topic activity-replays
  python -m runtime replay-jobs list --app app.yaml
"""


async def serve(cluster: Cluster, worker: str | None) -> int:
    service = ReplayService(_app(cluster), cluster.bootstrap_servers, worker)
    running = asyncio.create_task(service.run())

    def stop() -> None:  # the first signal releases the jobs, a second one does not wait for that
        if service.stopping:
            running.cancel()
        service.stop()

    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop)
    with contextlib.suppress(asyncio.CancelledError):
        await running
    return 0


async def request(cluster: Cluster, args: argparse.Namespace) -> int:
    app = _app(cluster)
    fields = {
        "id": args.id or uuid.uuid4().hex[:12],
        "topic": args.topic,
        "key": args.key,
        "partition": args.partition,
        "partitioner": args.partitioner,
        "from": args.start,
        "to": args.end,
        "target": args.to_topic,
    }
    try:
        wanted = ReplayRequest.model_validate({name: value for name, value in fields.items() if value is not None})
    except ValueError as error:
        raise CommandFailed(str(error)) from None
    await create_job_topics(Clients(app, cluster.bootstrap_servers), app)
    producer = cluster.producer()
    await producer.start()
    try:
        await producer.send_and_wait(app.replay_requests_topic(), wanted.encode(), key=wanted.id.encode())
    finally:
        await producer.stop()
    print(f"requested replay job {wanted.id}", file=sys.stderr)
    if not args.wait:
        return 0
    while True:
        state = (await jobs(cluster, app)).get(wanted.id)
        if state is not None and state.status.ended:
            print(state.model_dump_json(exclude_defaults=True))
            return 0 if state.status is Status.COMPLETED else 1
        await asyncio.sleep(0.5)


async def jobs(cluster: Cluster, app: AppConfig) -> dict[str, JobState]:
    """Every job's latest state, read committed."""
    consumer = cluster.consumer(group_id=None, isolation_level="read_committed")
    await consumer.start()
    found: dict[str, JobState] = {}
    try:
        tp = TopicPartition(app.replay_jobs_topic(), 0)
        if tp.topic not in await consumer.topics():
            return found
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                if record.value is not None:
                    state = JobState.decode(record.value)
                    found[state.id] = state
    finally:
        await consumer.stop()
    return found


async def list_jobs(cluster: Cluster, as_json: bool) -> int:
    found = await jobs(cluster, _app(cluster))
    if as_json:
        for state in found.values():
            print(state.model_dump_json(exclude_defaults=True))
        return 0
    table = Table("job", "status", "worker", "replays", "done", "read", "matched", "reason")
    for state in found.values():
        table.add_row(
            state.id,
            state.status,
            state.owner or "",
            _what(state),
            f"{state.share_read:.0%}",
            f"{state.scanned:,}",
            f"{state.matched:,}",
            state.reason or "",
        )
    Console().print(table)
    return 0


def _what(state: JobState) -> str:
    wanted = state.request
    if wanted is None:
        return ""
    which = f"key {wanted.key}" if wanted.key is not None else f"partition {wanted.partition}"
    if wanted.partitioner != DEFAULT:
        which += f" ({wanted.partitioner})"
    return f"{wanted.topic} {which} → {wanted.target}"


def _app(cluster: Cluster) -> AppConfig:
    if cluster.app is None:
        raise CommandFailed("give the app's YAML with --app: its replay_jobs section names the topics")
    return cluster.app


def parser() -> argparse.ArgumentParser:
    parser = command_parser("replay-jobs", "Run replay jobs, request one, or list them.", EPILOG)
    commands = parser.add_subparsers(dest="command", required=True)
    serving = commands.add_parser(
        "serve",
        help="run replay jobs until stopped",
        description="Run the replay jobs requested on the app's requests topic until SIGINT or SIGTERM, sharing "
        "them with the other `serve` processes of the app.",
    )
    serving.add_argument("--worker", help="this worker's name in the jobs' states (default: host-pid)")
    serving.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default: INFO)")
    serving.add_argument(
        "--log-format", choices=LOG_FORMATS, help="text, or json: one object per line (default: RUNTIME_LOG_FORMAT)"
    )
    asking = commands.add_parser(
        "request",
        help="request a replay job",
        description="Request a replay job: one key's records (or a partition's) in a time range, written to a topic.",
    )
    asking.add_argument("topic", help="the topic to replay")
    which = asking.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="the key: its partition is read, and only its records are kept")
    which.add_argument("--partition", type=int, metavar="P", help="every record of partition P in the range")
    asking.add_argument(
        "--partitioner",
        choices=list(PARTITIONERS),
        default=DEFAULT,
        help="with --key: how its producer chose the partition, by librdkafka's names (default murmur2_random, "
        "as Java's producer; librdkafka's clients default to consistent_random)",
    )
    asking.add_argument("--from", dest="start", type=parse_time, metavar="TIME", help="ISO 8601")
    asking.add_argument("--to", dest="end", type=parse_time, metavar="TIME", help="ISO 8601, not included")
    asking.add_argument("--to-topic", required=True, metavar="TOPIC", help="where the job writes the records")
    asking.add_argument("--id", help="the job's id (default: a new one); a request with a known id is dropped")
    asking.add_argument("--wait", action="store_true", help="wait for the job to end and print its last state")
    listing = commands.add_parser(
        "list", help="every job's latest state", description="Print every job's latest state."
    )
    listing.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    for sub in (serving, asking, listing):
        add_app_option(sub, required=True)
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)

    def body() -> Any:
        cluster = connect(args.app)
        if args.command == "serve":
            configure_logging(args.log_level, args.log_format or log_format_from_environment() or "text")
            LOG_FIELDS.app = cluster.app.app_id if cluster.app is not None else None
            return asyncio.run(serve(cluster, args.worker))
        if args.command == "request":
            return asyncio.run(request(cluster, args))
        return asyncio.run(list_jobs(cluster, args.json))

    return run(args.app, body)
