"""How a command runs: its errors reported as the app's are (a mistake in the YAML exits 2, a failure 1)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from aiokafka.errors import KafkaError

from runtime.commands.cluster import CommandFailed
from runtime.config import ConfigError, KafkaConfig, load_app
from runtime.console import EXIT_CONFIG, EXIT_FAILED, configure_logging, indent, log_format_from_environment, report
from runtime.devkafka.jars import DevKafkaError
from runtime.errors import EngineError
from runtime.kafka.authorization import UNNAMED, Authorization, RefusedOperation
from runtime.kafka.connection import AuthenticationRefused, BrokerUnavailable, configured_bootstrap
from runtime.kafka.permissions import principal


def run(app: Path | None, body: Callable[[], int], topic_operation: str = "Describe") -> int:
    """`body` may load the YAML, whose classes import from the working directory as an app's do; a topic
    the broker refuses it is told as refused `topic_operation`, what the command does with topics."""
    try:
        configure_logging(os.environ.get("RUNTIME_LOG_LEVEL", "WARNING"), log_format_from_environment() or "text")
    except ValueError as error:
        return report(f"error: {error}", EXIT_CONFIG)
    sys.path.insert(0, os.getcwd())
    try:
        return body()
    except BrokenPipeError:  # the reader of the output went away (`| head`): that is the end, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ConfigError as error:
        return report(f"error in {app}:\n{indent(str(error))}", EXIT_CONFIG)
    except (CommandFailed, EngineError, DevKafkaError, BrokerUnavailable, AuthenticationRefused) as error:
        return report(f"error: {error}", EXIT_FAILED)
    except (KafkaError, RefusedOperation) as error:
        denied = _authorization(app, topic_operation).translated(error)
        return report(f"error: {denied if denied is not error else f'Kafka refused: {error}'}", EXIT_FAILED)


def _authorization(app: Path | None, topic_operation: str) -> Authorization:
    """Who the command was, and where: the YAML it was given (the body loaded it already), else the environment."""
    kafka = load_app(app).kafka if app is not None else KafkaConfig()
    broker = configured_bootstrap(kafka) or "the local development broker"
    return Authorization(broker, principal(kafka) or UNNAMED, other_topics=topic_operation)


def command_parser(command: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=f"python -m runtime {command}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
