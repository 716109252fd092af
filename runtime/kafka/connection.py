"""Where the broker is, and the aiokafka clients built from the app's connection settings."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
)

from runtime.config import AppConfig, ConfigError, Guarantee, KafkaConfig, Rebalance
from runtime.kafka.authorization import AUTHORIZATION_ERRORS
from runtime.kafka.cooperative_coordinator import use_cooperative_coordinators
from runtime.kafka.group_assignor import Membership, assignors
from runtime.kafka.outages import OUTAGES
from runtime.kafka.refusals import REPORTED, Refusal, describe, hint, is_refusal
from runtime.kafka.security import client_security
from runtime.kafka.session_bounds import session_timeout_ms

log = logging.getLogger(__name__)

T = TypeVar("T")
START_ATTEMPTS = 6


class BrokerUnavailable(RuntimeError):
    """Kafka could not be reached for as long as the retries last."""


class AuthenticationRefused(RuntimeError):
    """Kafka answered, but refused the client's security handshake: retrying cannot help."""


class _ConnectFailures(logging.Handler):
    """aiokafka logs why a bootstrap connection failed and raises a bare "Unable to bootstrap":
    the cause is only in its log record, so it is taken from there, with the broker it names."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.refusals: list[Refusal] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        address = f"{args[0]}:{args[1]}" if len(args) == 3 else None
        found = [Refusal(address or "", arg) for arg in args if is_refusal(arg)]
        if found:
            setattr(record, REPORTED, True)  # the runtime reports it as its error: no outage, no second line
        self.refusals += found


@contextlib.contextmanager
def _refusals_logged() -> Iterator[list[Refusal]]:
    handler = _ConnectFailures()
    client_log = logging.getLogger("aiokafka")
    client_log.addHandler(handler)
    try:
        yield handler.refusals
    finally:
        client_log.removeHandler(handler)


def configured_bootstrap(kafka: KafkaConfig) -> str | None:
    """The YAML's servers, else KAFKA_BOOTSTRAP_SERVERS: None when neither names a broker."""
    return kafka.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None


def resolve_bootstrap(kafka: KafkaConfig) -> str:
    """The configured servers, else the local development broker, started if needed."""
    configured = configured_bootstrap(kafka)
    if configured:
        return configured
    from runtime.devkafka import managed

    broker, started = managed.start()
    verb = "started a" if started else "using the"
    log.warning(
        "no bootstrap servers configured: %s local development Kafka at %s "
        "(stop it with `python -m runtime dev-kafka stop`)",
        verb,
        broker.bootstrap_servers,
    )
    return broker.bootstrap_servers


FETCH_BUDGET_BYTES = 16 * 1024 * 1024
"""What the group consumer fetches for all its partitions at most, shared out among them: with Kafka's default
of 1 MB a partition, a worker of 96 partitions had an RSS of 750 MB, against 217 MB at 128 KB a partition,
and was no faster."""


def fetch_bytes_per_partition(partitions: int) -> int:
    """`max_partition_fetch_bytes` for a consumer of `partitions` partitions: 1 MB down to 64 KB."""
    return min(1024 * 1024, max(64 * 1024, FETCH_BUDGET_BYTES // max(1, partitions)))


class Clients:
    """Builds aiokafka clients: common options, then the per-client options from the YAML."""

    def __init__(self, config: AppConfig, bootstrap_servers: str):
        self._config = config
        self.bootstrap_servers = bootstrap_servers
        self._security = client_security(config.kafka.security)

    def _options(self, specific: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
        return {
            **defaults,
            **self._config.kafka.client,
            **specific,
            "bootstrap_servers": self.bootstrap_servers,
        }

    def consumer(self, **overrides: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(**self.consumer_options(**overrides), **self._security)

    def group_consumer(self, partitions: int, membership: Membership) -> AIOKafkaConsumer:
        """The app's group's consumer, which offers `cooperative-sticky` first unless `rebalance: eager`, then
        `range`; `membership` is what this worker tells the group as it joins, and what it learns back."""
        options = self.group_consumer_options(partitions)
        cooperative = self._config.rebalance is Rebalance.COOPERATIVE
        options["partition_assignment_strategy"] = assignors(membership, cooperative)
        use_cooperative_coordinators()
        return AIOKafkaConsumer(**options, **self._security)

    def group_consumer_options(self, partitions: int) -> dict[str, Any]:
        """The consumer of the app's group, which may be given all `partitions` of its inputs; its fetch size a
        partition is their share of `FETCH_BUDGET_BYTES` unless the YAML sets `max_partition_fetch_bytes`."""
        options = self.consumer_options()
        if self._config.kafka.group_instance_id is not None:
            options["group_instance_id"] = self._config.kafka.group_instance_id
        if "max_partition_fetch_bytes" not in self._config.kafka.consumer:
            options["max_partition_fetch_bytes"] = fetch_bytes_per_partition(partitions)
        if "heartbeat_interval_ms" not in {**self._config.kafka.client, **self._config.kafka.consumer}:
            options["heartbeat_interval_ms"] = heartbeat_interval_ms(session_timeout_ms(self._config))
        return options

    def consumer_options(self, **overrides: Any) -> dict[str, Any]:
        """A consumer's keyword arguments but its security, picklable: a reader process builds the same consumer
        from them and `kafka.security` (runtime/kafka/security.py)."""
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
        return AIOKafkaProducer(
            **self._options({**self._config.kafka.producer, **overrides}, defaults), **self._security
        )

    def admin(self) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(**self._options({}, {"client_id": f"{self._config.app_id}-admin"}), **self._security)


def heartbeat_interval_ms(session_timeout_ms: int) -> int:
    """A heartbeat a second (a third of the session at most), where aiokafka's is 3 s: the second round of a
    cooperative rebalance starts as each worker hears of it at its next heartbeat, so a join or a leave
    moves its partitions sooner, for one small request a second per worker."""
    return min(1000, session_timeout_ms // 3)


def check_clients(config: AppConfig) -> None:
    """Build each client once, without connecting: aiokafka's constructors check what the YAML's
    check cannot know (acks with idempotence, a compression codec, complete SASL settings)."""

    async def build_each() -> None:
        clients = Clients(config, "localhost")
        transactional = (
            {"transactional_id": "check", "transaction_timeout_ms": config.transaction_timeout_ms}
            if config.guarantee is Guarantee.EXACTLY_ONCE
            else {}
        )
        builds: list[tuple[str, str, Callable[[], Any]]] = [
            ("kafka.client", "admin client", clients.admin),  # first: the options every client shares
            ("kafka.consumer", "consumer", clients.consumer),
            ("kafka.producer", "producer", lambda: clients.producer(**transactional)),
        ]
        for section, what, build in builds:
            try:
                client = build()
            except (ValueError, TypeError) as error:
                sections = section if section == "kafka.client" else f"kafka.client and {section}"
                raise ConfigError(f"{sections}: aiokafka's {what} refuses them: {error}") from None
            await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())

    asyncio.run(build_each())


async def start_with_retries(what: str, bootstrap: str, start: Callable[[], Awaitable[T]]) -> T:
    """Bounded retries with backoff while the broker is unreachable, then a clear error; a refused
    authentication or security protocol is reported at once as what it is, and so is a refused permission."""
    delay = 0.5
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            with _refusals_logged() as refusals:
                return await start()
        except AUTHORIZATION_ERRORS:
            raise
        except (KafkaConnectionError, KafkaError, OSError) as error:
            raised = Refusal("", error) if is_refusal(error) else None
            refusal = raised or next(iter(refusals), None)
            if refusal is not None:
                broker = refusal.address or bootstrap
                raise AuthenticationRefused(
                    f"Kafka at {broker} refused the {what}'s {describe(refusal.error)}: {hint(refusal.error)}"
                ) from error
            if attempt == START_ATTEMPTS:
                raise BrokerUnavailable(
                    f"cannot reach Kafka at {bootstrap} for the {what} after {attempt} attempts: {error!r}"
                ) from error
            log.warning("Kafka at %s unreachable for the %s (%r); retrying in %.1fs", bootstrap, what, error, delay)
            OUTAGES.retrying_in(delay)  # an outage the client's errors opened is not over while the runtime waits
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8.0)
    raise AssertionError("unreachable")
