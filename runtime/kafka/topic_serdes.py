"""The serdes of an app's topics: by name (built in, or a class of the user's), or, for `avro` and
`json_schema`, bound to the topic's subject in the app's schema registry."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from processors.serdes import Serde
from runtime.config import AppConfig, ConfigError
from runtime.schema_registry.client import RegistryClient
from stores.serdes import REGISTRY_SERDES, resolve_serde

if TYPE_CHECKING:
    from runtime.schema_registry.serdes import Part


def registry_client(app: AppConfig | None) -> RegistryClient | None:
    """One client per process: its cache of schemas serves every topic."""
    return None if app is None or app.schema_registry is None else RegistryClient(app.schema_registry)


def serde_for(name: str, topic: str, part: Part, schema: Path | None, registry: RegistryClient | None) -> Serde:
    if name not in REGISTRY_SERDES:
        return resolve_serde(name)
    if registry is None:
        raise ConfigError(
            f"serde '{name}' of topic {topic} keeps its schemas in a schema registry: set schema_registry"
        )
    from runtime.schema_registry.serdes import registry_serde  # cavro and numpy load only for apps that need them

    return registry_serde(name, registry, topic, part, schema)


def topic_serdes(app: AppConfig) -> dict[str, tuple[Serde, Serde]]:
    """Every declared topic's key and value serdes."""
    registry = registry_client(app)
    return {
        name: (
            serde_for(topic.key_serde, name, "key", topic.key_schema, registry),
            serde_for(topic.value_serde, name, "value", topic.value_schema, registry),
        )
        for name, topic in app.topics.items()
    }
