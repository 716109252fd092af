"""The Kafka a command talks to: the app YAML's broker and client settings when it is given one."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient

from runtime.config import AppConfig, KafkaConfig, load_app
from runtime.devkafka import managed
from runtime.kafka.connection import check_clients, configured_bootstrap, resolve_bootstrap
from runtime.kafka.security import client_security
from runtime.kafka.topics import describe_partitions


class CommandFailed(Exception):
    """What a command could not do, phrased for its user (exit 1)."""


@dataclass(frozen=True)
class Cluster:
    """Clients built from the YAML's `kafka:` options, for commands: a consumer joins no group (a
    command reads a topic, it never takes partitions from the app's workers)."""

    bootstrap_servers: str
    kafka: KafkaConfig
    app: AppConfig | None
    app_path: Path | None

    @cached_property
    def _security(self) -> dict[str, Any]:
        """Made once: every client of the command shares one TLS context and one token provider."""
        return client_security(self.kafka.security)

    def _options(self, specific: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        return {
            **self.kafka.client,
            **specific,
            **overrides,
            **self._security,
            "bootstrap_servers": self.bootstrap_servers,
        }

    def admin(self) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(**self._options({}, {}))

    def client(self) -> AIOKafkaClient:
        """A bare client, for the requests the admin client does not make."""
        return AIOKafkaClient(**self._options({}, {}))

    def consumer(self, **overrides: Any) -> AIOKafkaConsumer:
        specific = {name: value for name, value in self.kafka.consumer.items() if name != "group_id"}
        return AIOKafkaConsumer(**self._options({**specific, "enable_auto_commit": False}, overrides))

    def producer(self, **overrides: Any) -> AIOKafkaProducer:
        defaults = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}
        return AIOKafkaProducer(**self._options({**defaults, **self.kafka.producer}, overrides))

    async def partitions(self, topic: str) -> int:
        """The topic's partition count; a topic that does not exist is a clear error."""
        admin = self.admin()
        await admin.start()
        try:
            count = (await describe_partitions(admin, [topic])).get(topic)
        finally:
            await admin.close()
        if count is None:
            app = self.app_path or "APP.yaml"
            hint = f"; an app's topics are created by `python -m runtime topics create --app {app}`"
            raise CommandFailed(f"topic '{topic}' does not exist at {self.bootstrap_servers}{hint}")
        return count


def connect(app_path: Path | None, *, start_local_broker: bool = True) -> Cluster:
    """The YAML's broker and options (checked as for running the app), else KAFKA_BOOTSTRAP_SERVERS,
    else the local development broker, started if needed — unless the command only makes sense against
    data that is already there, which a broker started now would not hold."""
    app = load_app(app_path) if app_path is not None else None
    if app is not None:
        check_clients(app)
    kafka = app.kafka if app is not None else KafkaConfig()
    if not start_local_broker and configured_bootstrap(kafka) is None and managed.running() is None:
        raise CommandFailed(
            "no broker named: give --app APP.yaml (its kafka.bootstrap_servers) or set KAFKA_BOOTSTRAP_SERVERS; "
            "the local development broker is not running (`python -m runtime dev-kafka start`)"
        )
    return Cluster(resolve_bootstrap(kafka), kafka, app, app_path)


def add_app_option(parser: argparse.ArgumentParser, required: bool = False) -> None:
    default = "" if required else " (default: KAFKA_BOOTSTRAP_SERVERS, else the local development broker)"
    parser.add_argument(
        "--app",
        type=Path,
        required=required,
        metavar="APP.yaml",
        help=f"the app's YAML: its broker and client settings, and its topics' serdes{default}",
    )
