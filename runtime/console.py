"""How the command line speaks to its user: log lines and errors on stderr, redacted, and exit statuses."""

from __future__ import annotations

import logging
import os
import sys
from typing import Final

from pythonjsonlogger.json import JsonFormatter

from runtime import redaction
from runtime.kafka.missing_topics import MISSING_TOPICS
from runtime.kafka.outages import OUTAGES
from runtime.log_fields import LOG_FIELDS, LOG_FORMATS, LogFormat
from runtime.redaction import redact

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"

EXIT_CONFIG = 2  # a usage or configuration mistake: running again unchanged meets it again
EXIT_FAILED = 1


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """To stderr, with every record redacted (aiokafka's own messages may echo the bootstrap servers), a
    broker outage and a missing topic folded, and in `json` one object per line with the fields of
    `runtime/log_fields.py`. Called again, it replaces what it configured before."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter(
                "{levelname}{name}{message}{process}",
                style="{",
                rename_fields={"levelname": "level", "name": "logger", "process": "pid"},
                timestamp="time",
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    handler.addFilter(OUTAGES)  # a broker outage told once, not in thousands of the client's errors
    handler.addFilter(MISSING_TOPICS)  # so is a deleted topic
    handler.addFilter(LOG_FIELDS)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    redaction.install(logging.getLogger().handlers)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    for client in ("boto3", "botocore", "s3transfer", "urllib3"):  # at debug, they print signed requests' headers
        logging.getLogger(client).setLevel(logging.WARNING)


def log_format_from_environment() -> LogFormat | None:
    """RUNTIME_LOG_FORMAT; a value it cannot be is a usage mistake."""
    value = os.environ.get("RUNTIME_LOG_FORMAT") or None
    if value is not None and value not in LOG_FORMATS:
        raise ValueError(f"RUNTIME_LOG_FORMAT: '{value}' is not one of {', '.join(LOG_FORMATS)}")
    return value  # type: ignore[return-value]


def report(message: str, exit_code: int) -> int:
    """Every error a command prints goes through the same redaction as the log, and is a line of the JSON log
    when the log is JSON (a log pipeline then reads why a worker stopped)."""
    if _logs_json():
        logging.getLogger("runtime").error(message)
    else:
        print(redact(message), file=sys.stderr)
    return exit_code


def _logs_json() -> bool:
    return any(isinstance(handler.formatter, JsonFormatter) for handler in logging.getLogger().handlers)


def indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
