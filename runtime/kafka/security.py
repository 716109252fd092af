"""aiokafka's security options made from `kafka.security` (stores/kafka_security.py), a file that cannot be
loaded reported as the YAML field that names it."""

from __future__ import annotations

from typing import Any

from runtime.config import ConfigError
from stores.kafka_security import KafkaSecurity, TlsFilesRefused, aiokafka_options


def client_security(security: KafkaSecurity) -> dict[str, Any]:
    """The keyword arguments every aiokafka client gets: one TLS context and one token provider per call."""
    try:
        return aiokafka_options(security)
    except TlsFilesRefused as error:
        raise ConfigError(f"kafka.security.{error}") from None
