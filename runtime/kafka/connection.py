"""Where the broker is, and the aiokafka clients built from the app's connection settings."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaConnectionError, KafkaError

from runtime.config import AppConfig

log = logging.getLogger(__name__)

T = TypeVar("T")
START_ATTEMPTS = 6


class BrokerUnavailable(RuntimeError):
    pass


def resolve_bootstrap(config: AppConfig) -> str:
    """The YAML's servers, else KAFKA_BOOTSTRAP_SERVERS, else the local development broker."""
    if config.kafka.bootstrap_servers:
        return config.kafka.bootstrap_servers
    from_env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if from_env:
        return from_env
    from runtime.devkafka import managed

    broker, started = managed.start()
    verb = "started a" if started else "using the"
    log.warning(
        "no bootstrap servers configured: %s local development Kafka at %s "
        "(stop it with `python -m runtime dev-kafka stop`)",
        verb, broker.bootstrap_servers,
    )  # fmt: skip
    return broker.bootstrap_servers


class Clients:
    """Builds aiokafka clients: common options, then the per-client options from the YAML."""

    def __init__(self, config: AppConfig, bootstrap_servers: str):
        self._config = config
        self.bootstrap_servers = bootstrap_servers

    def _options(self, specific: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
        return {
            **defaults,
            **self._config.kafka.client,
            **specific,
            "bootstrap_servers": self.bootstrap_servers,
        }

    def consumer(self, **overrides: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(**self.consumer_options(**overrides))

    def consumer_options(self, **overrides: Any) -> dict[str, Any]:
        """A consumer's keyword arguments, picklable: a reader process builds the same consumer from them."""
        defaults: dict[str, Any] = {
            "group_id": self._config.app_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "isolation_level": "read_committed",
            # Range keeps partition N of co-partitioned inputs on the same worker.
            "partition_assignment_strategy": (RangePartitionAssignor,),
            "client_id": f"{self._config.app_id}-consumer",
        }
        return self._options({**self._config.kafka.consumer, **overrides}, defaults)

    def producer(self, **overrides: Any) -> AIOKafkaProducer:
        defaults: dict[str, Any] = {
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 5,
            "max_batch_size": 512 * 1024,
            "client_id": f"{self._config.app_id}-producer",
        }
        return AIOKafkaProducer(**self._options({**self._config.kafka.producer, **overrides}, defaults))

    def admin(self) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(**self._options({}, {"client_id": f"{self._config.app_id}-admin"}))


async def start_with_retries(what: str, bootstrap: str, start: Callable[[], Awaitable[T]]) -> T:
    """Bounded retries with backoff while the broker is unreachable, then a clear error."""
    delay = 0.5
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return await start()
        except (KafkaConnectionError, KafkaError, OSError) as error:
            if attempt == START_ATTEMPTS:
                raise BrokerUnavailable(
                    f"cannot reach Kafka at {bootstrap} for the {what} after {attempt} attempts: {error!r}"
                ) from error
            log.warning("Kafka at %s unreachable for the %s (%r); retrying in %.1fs", bootstrap, what, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8.0)
    raise AssertionError("unreachable")
