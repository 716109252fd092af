"""The serdes a command reads and writes a topic with: its options, else the app YAML's, else bytes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from processors.serdes import Serde
from runtime.config import AppConfig, known_topic_serde
from runtime.kafka.topic_serdes import registry_client, serde_for
from stores.serdes import BytesSerde

UNDECLARED = ("bytes", "bytes")


@dataclass(frozen=True)
class TopicSerdes:
    key: Serde
    value: Serde

    @property
    def raw_key(self) -> bool:
        """Keys are bytes as they are: shown as text when they are UTF-8."""
        return isinstance(self.key, BytesSerde)

    @property
    def raw_value(self) -> bool:
        return isinstance(self.value, BytesSerde)


def declared_serdes(app: AppConfig | None, topic: str) -> tuple[str, str]:
    """A declared topic's, a changelog's (its store's), a global store's topic's; bytes for the rest."""
    if app is None:
        return UNDECLARED
    if topic in app.topics:
        return app.topics[topic].key_serde, app.topics[topic].value_serde
    for processor in app.processors:
        for store, spec in processor.stores.items():
            if spec.changelog and app.changelog_topic(store) == topic:
                return spec.key_serde, spec.value_serde
    for global_store in app.global_stores.values():
        if global_store.topic == topic:
            return global_store.key_serde, global_store.value_serde
    return UNDECLARED


def topic_serdes(app: AppConfig | None, topic: str, key_serde: str | None, value_serde: str | None) -> TopicSerdes:
    """Avro and JSON Schema topics use the app's schema registry and the topic's schema files."""
    key, value = declared_serdes(app, topic)
    declared = app.topics.get(topic) if app is not None else None
    schemas: tuple[Path | None, Path | None] = (
        (None, None) if declared is None else (declared.key_schema, declared.value_schema)
    )
    registry = registry_client(app)
    return TopicSerdes(
        serde_for(key_serde or key, topic, "key", schemas[0], registry),
        serde_for(value_serde or value, topic, "value", schemas[1], registry),
    )


def add_serde_options(parser: argparse.ArgumentParser) -> None:
    for part in ("key", "value"):
        parser.add_argument(
            f"--{part}-serde",
            type=_serde_name,
            metavar="SERDE",
            help=f"the {part}s' serde (default: the topic's in the app YAML, else bytes)",
        )


def _serde_name(name: str) -> str:
    try:
        return known_topic_serde(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
