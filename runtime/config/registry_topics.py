"""The app YAML's checks of topics whose serdes keep their schemas in the registry."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from runtime.config.schema_registry import SchemaRegistryConfig
from stores.serdes import REGISTRY_SERDES


class TopicSerdes(Protocol):
    key_serde: str
    value_serde: str
    key_schema: Path | None
    value_schema: Path | None


def check_schema_file(serde: str, path: Path) -> None:
    """The file can be read and compiled in the serde's schema format."""
    from runtime.schema_formats import FORMATS  # cavro and numpy load only for apps that need them

    schema_format = FORMATS.get(serde)
    if schema_format is None:
        raise ValueError(f"a schema file is for the serdes {' and '.join(FORMATS)}, not '{serde}'")
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    try:
        schema_format.compile(text)
    except ValueError as error:
        raise ValueError(f"{path} is {error}") from None


def check_registry_topics(topics: Mapping[str, TopicSerdes], registry: SchemaRegistryConfig | None) -> None:
    for name, topic in topics.items():
        for part in ("key", "value"):
            serde: str = getattr(topic, f"{part}_serde")
            if serde not in REGISTRY_SERDES:
                continue
            if registry is None:
                raise ValueError(
                    f"topics.{name}.{part}_serde: '{serde}' keeps its schemas in a schema registry: "
                    "set schema_registry.url"
                )
            if registry.subject_name_strategy != "topic_name" and getattr(topic, f"{part}_schema") is None:
                raise ValueError(
                    f"topics.{name}.{part}_schema: schema_registry.subject_name_strategy "
                    f"{registry.subject_name_strategy} names the subject after the record, so the topic "
                    "needs the schema it is written with"
                )
