"""The app YAML, validated: every mistake is reported with its path in the file."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from processors.global_updater import GlobalStoreUpdater
from processors.processor import Processor
from runtime.kafka.options import INT32_MAX, option_problems
from runtime.processor_params import checked_params, with_stores_params_need
from runtime.redaction import USERINFO, redact
from runtime.schema_registry.config import SchemaRegistryConfig
from runtime.schema_registry.topic_checks import check_registry_topics, check_schema_file
from runtime.store_kinds import retention_fits_kind
from runtime.substitution import UnsetVariable, expand_variables
from runtime.telemetry.config import TelemetryConfig
from runtime.timestamp_config import TimestampConfig
from runtime.yaml_loader import MAX_BYTES, UnsafeYaml, load_yaml
from stores.layout import StoreKind
from stores.serdes import REGISTRY_SERDES, RegistrySerdeOutsideTopic, UnknownSerde, import_object, resolve_serde

TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"
NAME = r"^[a-zA-Z0-9_-]+$"  # processors and stores: they become parts of paths and topic names
# Above any topic a cluster holds; Kafka's own limit is the int32 maximum.
MAX_PARTITIONS = 10_000
MAX_REPLICATION_FACTOR = 32_767  # an int16 in Kafka's protocol
# The broker's default transaction.max.timeout.ms: a longer transaction timeout is refused by it.
MAX_TRANSACTION_TIMEOUT_MS = 900_000


class ConfigError(Exception):
    """A problem in the app YAML, already phrased for the user (field path: what was expected)."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Guarantee(StrEnum):
    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE = "exactly_once"


class ErrorPolicy(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    DEAD_LETTER = "dead_letter"


class KafkaConfig(Strict):
    """Connection. The option maps are passed to aiokafka, once checked against its clients' constructors."""

    bootstrap_servers: str | None = None
    client: dict[str, Any] = Field(default_factory=dict)
    consumer: dict[str, Any] = Field(default_factory=dict)
    producer: dict[str, Any] = Field(default_factory=dict)

    @field_validator("bootstrap_servers")
    @classmethod
    def _no_credentials(cls, servers: str | None) -> str | None:
        if servers is not None and USERINFO.search(servers):
            raise ValueError(
                f"'{redact(servers)}' holds credentials; Kafka takes them from kafka.client "
                "(security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)"
            )
        return servers

    @model_validator(mode="after")
    def _options_aiokafka_accepts(self) -> KafkaConfig:
        sections = {"kafka.client": self.client, "kafka.consumer": self.consumer, "kafka.producer": self.producer}
        problems = [problem for section, options in sections.items() for problem in option_problems(section, options)]
        if problems:
            raise ValueError("\n".join(problems))
        return self


def _topic_name(name: str) -> str:
    """Kafka's rules, and none of its internal topics (`__consumer_offsets`, `__transaction_state`)."""
    if not re.match(TOPIC_NAME, name) or name in (".", ".."):
        raise ValueError(f"'{name}' is not a valid Kafka topic name")
    if name.startswith("__"):
        raise ValueError(f"'{name}' starts with '__', which names Kafka's internal topics")
    return name


def _describe(error: Exception) -> str:
    return str(error) if isinstance(error, ImportError) else f"{type(error).__name__}: {error}"


def known_serde(name: str) -> str:
    """The name, if it resolves to a serde; else a ValueError saying why not."""
    try:
        resolve_serde(name)
    except (UnknownSerde, RegistrySerdeOutsideTopic) as error:
        raise ValueError(str(error)) from None
    except Exception as error:  # a user module may fail in any way: report it at its YAML path
        raise ValueError(f"unknown serde '{name}': {_describe(error)}") from None
    return name


def known_topic_serde(name: str) -> str:
    """A topic's serde may also keep its schemas in the schema registry (avro, json_schema)."""
    return name if name in REGISTRY_SERDES else known_serde(name)


def _derived_topic(path: str, what: str, name: str) -> None:
    """A topic the runtime names after the app (changelogs, dead letters) must be valid too."""
    try:
        _topic_name(name)
    except ValueError as error:
        raise ValueError(f"{path}: the {what} topic {error}") from None


class TopicConfig(Strict):
    partitions: int = Field(default=1, ge=1, le=MAX_PARTITIONS)
    replication_factor: int = Field(default=1, ge=1, le=MAX_REPLICATION_FACTOR)
    key_serde: str = "msgpack"
    value_serde: str = "msgpack"
    # With a registry serde: the schema the app writes with and reads into (an Avro .avsc, a JSON
    # Schema); without one, it writes with the subject's latest schema and reads with each record's.
    key_schema: Path | None = None
    value_schema: Path | None = None
    cleanup_policy: Literal["delete", "compact", "compact,delete"] = "delete"
    config: dict[str, str] = Field(default_factory=dict)
    timestamp: TimestampConfig | None = None  # None: the Kafka record's timestamp

    _serdes_exist = field_validator("key_serde", "value_serde")(classmethod(lambda cls, name: known_topic_serde(name)))

    @field_validator("key_schema", "value_schema")
    @classmethod
    def _schema_fits_its_serde(cls, schema: Path | None, info: ValidationInfo) -> Path | None:
        serde = info.data.get(str(info.field_name).replace("_schema", "_serde"))
        if schema is not None and serde is not None:
            check_schema_file(serde, schema)
        return schema


class SnapshotsConfig(Strict):
    """Where bulk snapshots of stores are found: `<location>/<store>/<any name>/manifest.json`.

    A mapping rather than a bare path, so object stores can be added as other fields later.
    """

    location: Path

    @field_validator("location", mode="before")
    @classmethod
    def _local_path(cls, location: object) -> object:
        if isinstance(location, str) and "://" in location:
            raise ValueError(f"'{location}' is a URL; only local or mounted directories are supported")
        return location


class StoreConfig(Strict):
    """A task-local store of a `kind`: key-value, window or session. With a changelog it survives crashes
    and moves with its partition."""

    kind: StoreKind = "key_value"
    backend: Literal["memory", "rocksdb"] = "rocksdb"
    changelog: bool = True
    key_serde: str = "msgpack"
    value_serde: str = "msgpack"
    retention_ms: int | None = Field(default=None, gt=0, validate_default=True)
    snapshots: SnapshotsConfig | None = None

    _serdes_exist = field_validator("key_serde", "value_serde")(classmethod(lambda cls, name: known_serde(name)))
    _retention_fits_kind = field_validator("retention_ms")(
        classmethod(lambda cls, retention_ms, info: retention_fits_kind(retention_ms, info))
    )

    @model_validator(mode="after")
    def _snapshots_need_rocksdb_and_changelog(self) -> StoreConfig:
        if self.snapshots is not None and (self.backend != "rocksdb" or not self.changelog):
            raise ValueError("snapshots are ingested into RocksDB stores with a changelog only")
        return self


class GlobalStoreConfig(Strict):
    """Reference data: the whole topic replicated into every worker, read before any record is processed."""

    topic: str
    backend: Literal["memory", "rocksdb"] = "rocksdb"
    key_serde: str = "msgpack"
    value_serde: str = "msgpack"
    updater: str | None = None
    errors: Literal["skip", "dead_letter"] = "skip"
    snapshots: SnapshotsConfig | None = None

    _serdes_exist = field_validator("key_serde", "value_serde")(classmethod(lambda cls, name: known_serde(name)))
    _valid_topic = field_validator("topic")(classmethod(lambda cls, name: _topic_name(name)))

    @field_validator("updater")
    @classmethod
    def _class_is_updater(cls, path: str | None) -> str | None:
        if path is not None:
            _import_subclass(path, GlobalStoreUpdater, "global store updater")
        return path

    @model_validator(mode="after")
    def _snapshots_need_rocksdb(self) -> GlobalStoreConfig:
        if self.snapshots is not None and self.backend != "rocksdb":
            raise ValueError("snapshots are ingested into RocksDB stores only")
        return self


def _import_subclass(path: str, base: type, what: str) -> None:
    try:
        found = import_object(path)
    except Exception as error:  # a user module may fail in any way: report it at its YAML path
        raise ValueError(f"cannot import {what} class '{path}': {_describe(error)}") from None
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ValueError(f"'{path}' is not a subclass of {base.__module__.split('.')[0]}.{base.__name__}")


class ProcessorConfig(Strict):
    name: str = Field(pattern=NAME)
    class_path: str = Field(alias="class")
    inputs: list[str] = Field(min_length=1)
    outputs: list[str] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    stores: dict[str, StoreConfig] = Field(default_factory=dict, validate_default=True)  # the class may add some

    _params_fit_class = field_validator("params")(classmethod(lambda cls, params, info: checked_params(params, info)))
    _stores_params_need = field_validator("stores", mode="before")(
        classmethod(lambda cls, stores, info: with_stores_params_need(stores, info))
    )

    @field_validator("stores")
    @classmethod
    def _store_names(cls, stores: dict[str, StoreConfig]) -> dict[str, StoreConfig]:
        for name in stores:
            if not re.match(NAME, name):
                raise ValueError(f"store name '{name}' may only use letters, digits, '_' and '-'")
            if name == "global":
                raise ValueError("store name 'global' is reserved: global stores live in <state_dir>/<app_id>/global")
        return stores

    @field_validator("class_path")
    @classmethod
    def _class_is_processor(cls, path: str) -> str:
        _import_subclass(path, Processor, "processor")
        return path

    def processor_class(self) -> type[Processor]:
        found: type[Processor] = import_object(self.class_path)
        return found


class QueueConfig(Strict):
    """Per-task queue bounds, in records: pause the task's partitions at `pause_at`, resume at `resume_at`."""

    pause_at: int = Field(default=2000, ge=1)
    resume_at: int = Field(default=500, ge=0)

    @model_validator(mode="after")
    def _resume_below_pause(self) -> QueueConfig:
        if self.resume_at >= self.pause_at:
            raise ValueError(f"resume_at ({self.resume_at}) must be below pause_at ({self.pause_at})")
        return self


class ErrorsConfig(Strict):
    deserialization: ErrorPolicy = ErrorPolicy.FAIL
    processing: ErrorPolicy = ErrorPolicy.FAIL
    dead_letter_topic: str | None = None

    @field_validator("dead_letter_topic")
    @classmethod
    def _valid_topic(cls, name: str | None) -> str | None:
        return None if name is None else _topic_name(name)


class AppConfig(Strict):
    app_id: str = Field(pattern=r"^[a-zA-Z0-9._-]+$")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    topics: dict[str, TopicConfig] = Field(default_factory=dict)
    processors: list[ProcessorConfig] = Field(min_length=1)
    global_stores: dict[str, GlobalStoreConfig] = Field(default_factory=dict)
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE
    commit_interval_ms: int | None = Field(default=None, ge=1, le=INT32_MAX)
    transaction_timeout_ms: int = Field(default=10_000, ge=1000)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    max_task_idle_ms: int = Field(default=0, ge=0, le=INT32_MAX)
    errors: ErrorsConfig = Field(default_factory=ErrorsConfig)
    create_topics: bool = True
    shutdown_timeout_s: float = Field(default=30.0, gt=0)
    state_dir: Path = Path("state")
    snapshots: SnapshotsConfig | None = None
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    schema_registry: SchemaRegistryConfig | None = None

    @field_validator("app_id")
    @classmethod
    def _app_id_stays_inside(cls, app_id: str) -> str:
        """It names a directory under state_dir and prefixes internal topics."""
        if app_id in (".", ".."):
            raise ValueError(f"'{app_id}' would put the app's stores outside state_dir")
        if app_id.startswith("__"):
            raise ValueError(f"'{app_id}' starts with '__': its topics would look like Kafka's internal topics")
        return app_id

    @field_validator("transaction_timeout_ms")
    @classmethod
    def _broker_accepts(cls, timeout_ms: int) -> int:
        if timeout_ms > MAX_TRANSACTION_TIMEOUT_MS:
            raise ValueError(
                f"{timeout_ms} is above {MAX_TRANSACTION_TIMEOUT_MS}, the broker's default "
                "transaction.max.timeout.ms: it would refuse every transaction"
            )
        return timeout_ms

    @field_validator("topics")
    @classmethod
    def _topic_names(cls, topics: dict[str, TopicConfig]) -> dict[str, TopicConfig]:
        for name in topics:
            _topic_name(name)
        return topics

    @model_validator(mode="after")
    def _references(self) -> AppConfig:
        names = [p.name for p in self.processors]
        for index, processor in enumerate(self.processors):
            if names.count(processor.name) > 1:
                raise ValueError(f"processors[{index}].name: '{processor.name}' is used twice")
            for field_name in ("inputs", "outputs"):
                for topic in getattr(processor, field_name):
                    if topic not in self.topics:
                        raise ValueError(
                            f"processors[{index}].{field_name}: topic '{topic}' is not declared under topics"
                        )
            counts = {topic: self.topics[topic].partitions for topic in processor.inputs}
            if len(set(counts.values())) > 1:
                raise ValueError(
                    f"processors[{index}].inputs: inputs of one processor must be co-partitioned "
                    f"(same number of partitions), got {counts}"
                )
        store_owners: dict[str, str] = {}
        for index, processor in enumerate(self.processors):
            for store, spec in processor.stores.items():
                if store in store_owners:
                    raise ValueError(
                        f"processors[{index}].stores.{store}: the name is already used by processor "
                        f"'{store_owners[store]}' (store names are app-wide: they name changelog topics)"
                    )
                store_owners[store] = processor.name
                if spec.changelog:
                    _derived_topic(f"processors[{index}].stores.{store}", "changelog", self.changelog_topic(store))
        check_registry_topics(self.topics, self.schema_registry)
        for name in self.global_stores:
            if not re.match(NAME, name):
                raise ValueError(f"global_stores.{name}: the name may only use letters, digits, '_' and '-'")
        needs_dead_letters = ErrorPolicy.DEAD_LETTER in (self.errors.deserialization, self.errors.processing) or any(
            spec.errors == "dead_letter" for spec in self.global_stores.values()
        )
        if needs_dead_letters and self.dead_letter_topic not in self.topics:
            _derived_topic("app_id", "dead-letter", self.dead_letter_topic)
            # The dead-letter topic always exists as bytes, whatever the app's serdes are.
            self.topics[self.dead_letter_topic] = TopicConfig(key_serde="bytes", value_serde="bytes")
        return self

    @property
    def commit_interval_s(self) -> float:
        """1 s by default; 100 ms under exactly-once, where it bounds how long outputs stay invisible."""
        if self.commit_interval_ms is not None:
            return self.commit_interval_ms / 1000
        return 0.1 if self.guarantee is Guarantee.EXACTLY_ONCE else 1.0

    @property
    def dead_letter_topic(self) -> str:
        return self.errors.dead_letter_topic or f"{self.app_id}-dead-letters"

    def changelog_topic(self, store: str) -> str:
        return f"{self.app_id}-{store}-changelog"

    def snapshots_for(self, store: StoreConfig | GlobalStoreConfig) -> SnapshotsConfig | None:
        """The store's own setting, else the app's; only RocksDB stores with a changelog (a global
        store's topic is its changelog) take snapshots."""
        if store.backend != "rocksdb" or (isinstance(store, StoreConfig) and not store.changelog):
            return None
        return store.snapshots or self.snapshots

    @property
    def group_id(self) -> str:
        """The consumer group: the app id unless `kafka.consumer.group_id` says otherwise."""
        return str(self.kafka.consumer.get("group_id", self.app_id))

    def input_topics(self) -> list[str]:
        return sorted({topic for processor in self.processors for topic in processor.inputs})


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(top level)"


def format_validation_error(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        message = problem["msg"].removeprefix("Value error, ")
        location = _location(tuple(problem["loc"]))
        if message.startswith(("processors[", "topics.", "global_stores.", "kafka.", "app_id:")):
            lines.append(message)  # a cross-field check that already names its path
        else:
            lines.append(f"{location}: {message}")
    return "\n".join(lines)


def parse_app(data: Any) -> AppConfig:
    """The app from the loaded YAML; every ConfigError message is already redacted."""
    if not isinstance(data, dict):
        raise ConfigError("(top level): expected a mapping with app_id, topics and processors")
    try:
        return AppConfig.model_validate(expand_variables(data))
    except ValidationError as error:
        raise ConfigError(redact(format_validation_error(error))) from None
    except UnsetVariable as error:
        raise ConfigError(str(error)) from None


def load_app(path: Path) -> AppConfig:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)  # a larger file is refused without reading it all
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    try:
        document = load_yaml(data)
    except UnsafeYaml as error:
        raise ConfigError(redact(f"{path} {error}")) from None
    return parse_app(document)
