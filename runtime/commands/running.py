"""How a command runs: its errors reported as the app's are (a mistake in the YAML exits 2, a failure 1)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from aiokafka.errors import KafkaError

from runtime.commands.cluster import CommandFailed
from runtime.config import ConfigError
from runtime.console import EXIT_CONFIG, EXIT_FAILED, configure_logging, indent, log_format_from_environment, report
from runtime.devkafka.jars import DevKafkaError
from runtime.errors import EngineError
from runtime.kafka.connection import AuthenticationRefused, BrokerUnavailable


def run(app: Path | None, body: Callable[[], int]) -> int:
    """`body` may load the YAML, whose classes import from the working directory as an app's do."""
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
    except KafkaError as error:
        return report(f"error: Kafka refused: {error}", EXIT_FAILED)


def command_parser(command: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=f"python -m runtime {command}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
