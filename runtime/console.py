"""How the command line speaks to its user: log lines and errors on stderr, redacted, and exit statuses."""

from __future__ import annotations

import logging
import sys

from runtime import redaction
from runtime.kafka.outages import OUTAGES
from runtime.redaction import redact

EXIT_CONFIG = 2  # a usage or configuration mistake: running again unchanged meets it again
EXIT_FAILED = 1


def configure_logging(level: str) -> None:
    """To stderr, with every record redacted: aiokafka's own messages may echo the bootstrap servers."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
        stream=sys.stderr,
    )
    redaction.install(logging.getLogger().handlers)
    for handler in logging.getLogger().handlers:
        handler.addFilter(OUTAGES)  # a broker outage told once, not in thousands of the client's errors
    logging.getLogger("aiokafka").setLevel(logging.WARNING)


def report(message: str, exit_code: int) -> int:
    """Every error a command prints goes through the same redaction as the log."""
    print(redact(message), file=sys.stderr)
    return exit_code


def indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
