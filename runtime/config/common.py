"""Names, limits and checks the sections of the app YAML share."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from stores.serdes import REGISTRY_SERDES, RegistrySerdeOutsideTopic, UnknownSerde, import_object, resolve_serde

TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"
NAME = r"^[a-zA-Z0-9_-]+$"  # processors and stores: they become parts of paths and topic names
# Above any topic a cluster holds; Kafka's own limit is the int32 maximum.
MAX_PARTITIONS = 10_000
MAX_REPLICATION_FACTOR = 32_767  # an int16 in Kafka's protocol
# The broker's default transaction.max.timeout.ms: a longer transaction timeout is refused by it.
MAX_TRANSACTION_TIMEOUT_MS = 900_000
DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class ConfigError(Exception):
    """A problem in the app YAML, already phrased for the user (field path: what was expected)."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def valid_topic_name(name: str) -> str:
    """Kafka's rules, and none of its internal topics (`__consumer_offsets`, `__transaction_state`)."""
    if not re.match(TOPIC_NAME, name) or name in (".", ".."):
        raise ValueError(f"'{name}' is not a valid Kafka topic name")
    if name.startswith("__"):
        raise ValueError(f"'{name}' starts with '__', which names Kafka's internal topics")
    return name


def replicas(factor: int) -> int:
    """A replication factor: a number of replicas, or -1 for the broker's `default.replication.factor`."""
    if factor == 0 or factor < -1:
        raise ValueError(f"{factor} is no number of replicas: 1 or more, or -1 for the broker's default")
    if factor > MAX_REPLICATION_FACTOR:
        raise ValueError(f"{factor} is above {MAX_REPLICATION_FACTOR}, the most Kafka's protocol carries")
    return factor


def duration_ms(given: object) -> object:
    """Milliseconds of a duration written with its unit ("30s", "15m", "1h", "1d"); anything else as it
    was given, for the field's own checks (a plain number is milliseconds)."""
    if isinstance(given, str):
        found = DURATION.match(given.strip())
        if found is None:
            raise ValueError(f"'{given}' is not a duration: write milliseconds, or a number with ms, s, m, h or d")
        return int(found.group(1)) * UNIT_MS[found.group(2)]
    return given


def describe_error(error: Exception) -> str:
    return str(error) if isinstance(error, ImportError) else f"{type(error).__name__}: {error}"


def known_serde(name: str) -> str:
    """The name, if it resolves to a serde; else a ValueError saying why not."""
    try:
        resolve_serde(name)
    except (UnknownSerde, RegistrySerdeOutsideTopic) as error:
        raise ValueError(str(error)) from None
    except Exception as error:  # a user module may fail in any way: report it at its YAML path
        raise ValueError(f"unknown serde '{name}': {describe_error(error)}") from None
    return name


def known_topic_serde(name: str) -> str:
    """A topic's serde may also keep its schemas in the schema registry (avro, json_schema)."""
    return name if name in REGISTRY_SERDES else known_serde(name)


def derived_topic(path: str, what: str, name: str) -> None:
    """A topic the runtime names after the app (changelogs, dead letters) must be valid too."""
    try:
        valid_topic_name(name)
    except ValueError as error:
        raise ValueError(f"{path}: the {what} topic {error}") from None


def import_subclass(path: str, base: type, what: str) -> None:
    try:
        found = import_object(path)
    except Exception as error:  # a user module may fail in any way: report it at its YAML path
        raise ValueError(f"cannot import {what} class '{path}': {describe_error(error)}") from None
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ValueError(f"'{path}' is not a subclass of {base.__module__.split('.')[0]}.{base.__name__}")
