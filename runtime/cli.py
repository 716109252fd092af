"""Command line: run an app from its YAML, or one of the commands of `runtime/commands/`."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from runtime.config import AppConfig, ConfigError, load_app
from runtime.console import (
    EXIT_CONFIG,
    EXIT_FAILED,
    configure_logging,
    indent,
    log_format_from_environment,
    report,
)
from runtime.devkafka.jars import DevKafkaError
from runtime.garbage_collection import tune_garbage_collector
from runtime.kafka.connection import AuthenticationRefused, BrokerUnavailable, check_clients, resolve_bootstrap
from runtime.log_fields import LOG_FIELDS, LOG_FORMATS
from runtime.telemetry import TelemetryError
from runtime.worker.restarts import RestartPolicy
from runtime.worker.supervisor import WORKER_INDEX, for_worker, run_workers
from runtime.worker.watchdog import Watchdog
from runtime.worker.worker import Worker, WorkerFailed

log = logging.getLogger("runtime")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Command name -> (module, what it does, for the top-level --help).
COMMANDS: dict[str, tuple[str, str]] = {
    "dev-kafka": ("runtime.devkafka.cli", "start, stop or check the local development broker"),
    "dev-postgres": ("runtime.devpostgres.cli", "start, stop or check the local development PostgreSQL"),
    "dev-s3": ("runtime.devs3.cli", "start, stop or check the local S3-compatible object store"),
    "topics": ("runtime.commands.topics", "list, describe or create topics"),
    "produce": ("runtime.commands.produce", "write JSON lines to a topic, encoded with its serdes"),
    "consume": ("runtime.commands.consume", "print a topic's records as JSON lines, decoded with its serdes"),
    "describe": ("runtime.commands.describe", "an app's topology: processors, topics, stores, internal topics"),
    "acls": ("runtime.commands.acls", "the Kafka ACLs an app needs, as kafka-acls.sh commands"),
    "reset": ("runtime.commands.reset", "move an app's committed offsets; optionally delete its state"),
    "query": ("runtime.commands.query", "a key of a running app's store, or its keys under a prefix, from its workers"),
    "replay": ("runtime.replay.cli", "one key's records (or a partition's) in a time range, from its partition only"),
    "checkpoint": ("runtime.rewind.checkpoint_cli", "checkpoint the running app's stores now, or list its checkpoints"),
    "rewind": ("runtime.rewind.cli", "take a stopped app back to a checkpoint, to process its inputs again from there"),
    "replay-jobs": ("runtime.replay.jobs.cli", "run replay jobs that outlive their worker, request one, list them"),
}


def run_command(name: str, argv: list[str]) -> int:
    main: Callable[[list[str]], int] = importlib.import_module(COMMANDS[name][0]).main
    return main(argv)


def summary() -> str:
    """The commands and what each does, for the top-level --help."""
    width = max(map(len, COMMANDS))
    return "commands (each with --help):\n" + "\n".join(
        f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime",
        usage="%(prog)s app.yaml [options] | %(prog)s <command> ...",
        description="Run a stream-processing app described in YAML, or one of the commands below.",
        epilog=summary(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("app", type=Path, help="the app's YAML file")
    parser.add_argument(
        "--workers",
        type=_at_least(1),
        default=1,
        help="worker processes in the consumer group (default 1: the worker runs in this process)",
    )
    parser.add_argument(
        "--max-restarts",
        type=_at_least(0),
        default=RestartPolicy.max_restarts,
        help="with --workers N: restarts in a row of a worker that keeps dying within a minute, before all stop "
        "(default %(default)s; 0: none)",
    )
    parser.add_argument(
        "--until-caught-up",
        action="store_true",
        help="process the records present at start, commit and exit",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("RUNTIME_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (default: RUNTIME_LOG_LEVEL, else INFO)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="text, or json: one object per line (default: RUNTIME_LOG_FORMAT, else the YAML's log_format, else text)",
    )
    return parser


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of at least {minimum}")
        return number

    return parse


def main(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        return run_command(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    try:
        log_format = args.log_format or log_format_from_environment()
    except ValueError as error:
        return report(f"error: {error}", EXIT_CONFIG)
    configure_logging(args.log_level, log_format or "text")
    sys.path.insert(0, os.getcwd())
    try:
        config = load_app(args.app)
        check_clients(config)
    except ConfigError as error:
        return report(f"error in {args.app}:\n{indent(str(error))}", EXIT_CONFIG)
    if log_format is None and config.log_format is not None:
        log_format = config.log_format
        configure_logging(args.log_level, log_format)
    LOG_FIELDS.app = config.app_id
    try:
        bootstrap = resolve_bootstrap(config.kafka)
    except DevKafkaError as error:
        return report(f"error: {error}", EXIT_FAILED)
    if args.workers > 1:
        policy = RestartPolicy(max_restarts=args.max_restarts)
        logging_options = ["--log-level", args.log_level, "--log-format", log_format or "text"]
        return run_workers(
            args.workers, args.app, bootstrap, args.until_caught_up, logging_options, policy, config.shutdown_timeout_s
        )
    index = LOG_FIELDS.worker = int(os.environ.get(WORKER_INDEX, "0"))
    return run_worker(for_worker(config, index), bootstrap, args.until_caught_up, args.app, index)


def run_worker(config: AppConfig, bootstrap: str, until_caught_up: bool, app_path: Path, index: int) -> int:
    """SIGINT and SIGTERM are handled by a plain signal handler, not the event loop's: Python runs it
    between two bytecodes of the main thread, so it starts the stop's deadline, and the watchdog behind
    it, also while a processor blocks the loop, which would never read a signal the loop was to handle."""
    watchdog: Watchdog | None = None

    async def serve() -> None:
        nonlocal watchdog
        worker = Worker(config, bootstrap, until_caught_up, index=index)
        watchdog = Watchdog(worker.deadline, worker.doing)
        watchdog.start()
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda signum, frame: worker.stop())
        await worker.run()

    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    tune_garbage_collector()
    try:
        asyncio.run(serve())
    except ConfigError as error:
        return report(f"error in {app_path}:\n{indent(str(error))}", EXIT_CONFIG)
    except TelemetryError as error:
        return report(f"error in {app_path}:\n{indent(f'telemetry: {error}')}", EXIT_CONFIG)
    except (WorkerFailed, BrokerUnavailable, AuthenticationRefused) as error:
        return report(f"error: {error}", EXIT_FAILED)
    finally:
        if watchdog is not None:
            watchdog.stand_down()
        for signum, handler in handlers.items():  # as they were: the worker they stop is gone
            signal.signal(signum, handler)
    return 0
