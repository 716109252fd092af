"""The whole app: its sections, the guarantee, and the checks across sections."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path

from pydantic import Field, PrivateAttr, field_validator, model_validator

from runtime.config.common import MAX_TRANSACTION_TIMEOUT_MS, NAME, Strict, derived_topic, valid_topic_name
from runtime.config.health import HealthConfig
from runtime.config.internal_topics import InternalTopicsConfig
from runtime.config.kafka import KafkaConfig
from runtime.config.kafka_options import INT32_MAX
from runtime.config.outbox import OutboxConfig
from runtime.config.processors import ProcessorConfig
from runtime.config.queries import QueriesConfig
from runtime.config.registry_topics import check_registry_topics
from runtime.config.replay_jobs import ReplayJobsConfig
from runtime.config.schema_registry import SchemaRegistryConfig
from runtime.config.singletons import SingletonsConfig
from runtime.config.stores import GlobalStoreConfig, RocksDBConfig, SnapshotsConfig, StoreConfig
from runtime.config.table_follower import TableFollowerConfig
from runtime.config.telemetry import TelemetryConfig
from runtime.config.topics import TopicConfig
from runtime.log_fields import LogFormat

NAME_MAX = 255  # bytes of one folder name on Linux's and macOS's file systems


class Guarantee(StrEnum):
    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE = "exactly_once"


class Rebalance(StrEnum):
    """How the group moves partitions when its members change: cooperative stops only the tasks that move
    (docs/configuration.md's `rebalance`), eager stops every task of every member at each change."""

    COOPERATIVE = "cooperative"
    EAGER = "eager"


class ErrorPolicy(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    DEAD_LETTER = "dead_letter"


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
        return None if name is None else valid_topic_name(name)


class AppConfig(Strict):
    app_id: str = Field(pattern=r"^[a-zA-Z0-9._-]+$")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    topics: dict[str, TopicConfig] = Field(default_factory=dict)
    processors: list[ProcessorConfig] = Field(min_length=1)
    global_stores: dict[str, GlobalStoreConfig] = Field(default_factory=dict)
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE
    rebalance: Rebalance = Rebalance.COOPERATIVE
    commit_interval_ms: int | None = Field(default=None, ge=1, le=INT32_MAX)
    transaction_timeout_ms: int = Field(default=10_000, ge=1000)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    max_task_idle_ms: int = Field(default=0, ge=0, le=INT32_MAX)
    errors: ErrorsConfig = Field(default_factory=ErrorsConfig)
    create_topics: bool = True
    internal_topics: InternalTopicsConfig = Field(default_factory=InternalTopicsConfig)
    shutdown_timeout_s: float = Field(default=30.0, gt=0)
    state_dir: Path = Path("state")
    # Other workers each keeping a stateful task's RocksDB stores warm from their changelogs, for a fast failover.
    standby_replicas: int = Field(default=0, ge=0, le=INT32_MAX)
    # With standbys: a task goes to a worker at most this many changelog records behind while another is
    # caught up; a worker further behind warms up first (KIP-441), as Kafka Streams' default.
    acceptable_recovery_lag: int = Field(default=10_000, ge=0, le=2**63 - 1)
    # While warm-ups run, the group's leader rebalances this often to move the tasks whose warm-up caught up.
    probing_rebalance_interval_ms: int = Field(default=600_000, ge=1, le=INT32_MAX)
    rocksdb: RocksDBConfig = Field(default_factory=RocksDBConfig)
    # What the stores of a worker hold in memory until their commit: past it, the commit comes early.
    store_buffer_mb: int = Field(default=16, ge=1)
    snapshots: SnapshotsConfig | None = None
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    health: HealthConfig | None = None  # /live and /ready over HTTP
    queries: QueriesConfig | None = None  # reads of the stores, on the health port
    log_format: LogFormat | None = None  # --log-format and RUNTIME_LOG_FORMAT come first; unset: text
    schema_registry: SchemaRegistryConfig | None = None
    outboxes: dict[str, OutboxConfig] = Field(default_factory=dict)  # database tables shipped to Kafka
    table_followers: dict[str, TableFollowerConfig] = Field(default_factory=dict)  # tables into compacted topics
    singletons: SingletonsConfig = Field(default_factory=SingletonsConfig)  # who runs outboxes and followers
    replay_jobs: ReplayJobsConfig = Field(default_factory=ReplayJobsConfig)  # `python -m runtime replay-jobs`
    _derived_topics: set[str] = PrivateAttr(default_factory=set)  # set by the checks: see derived_topics

    @field_validator("app_id")
    @classmethod
    def _app_id_stays_inside(cls, app_id: str) -> str:
        """It names a directory under state_dir and prefixes internal topics."""
        if app_id in (".", ".."):
            raise ValueError(f"'{app_id}' would put the app's stores outside state_dir")
        if app_id.startswith("__"):
            raise ValueError(f"'{app_id}' starts with '__': its topics would look like Kafka's internal topics")
        return app_id

    @field_validator("state_dir")
    @classmethod
    def _folder_names_a_file_system_takes(cls, state_dir: Path) -> Path:
        """A name past the file system's limit would fail every store's open, each with its own error."""
        for part in state_dir.parts:
            length = len(os.fsencode(part))
            if length > NAME_MAX:
                raise ValueError(f"the folder name '{part[:20]}...' is {length} bytes long: at most {NAME_MAX} fit")
        return state_dir

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
            valid_topic_name(name)
        return topics

    @model_validator(mode="after")
    def _references(self) -> AppConfig:
        self._put_rekeying_in_front()
        names = [p.name for p in self.processors]
        for index, processor in enumerate(self.processors):
            if names.count(processor.name) > 1:
                raise ValueError(f"processors[{index}].name: '{processor.name}' is used twice")
            for field_name in ("inputs", "broadcast", "outputs"):
                for topic in getattr(processor, field_name):
                    if topic not in self.topics:
                        raise ValueError(
                            f"processors[{index}].{field_name}: topic '{topic}' is not declared under topics"
                        )
            for name, table in processor.tables.items():
                if table.topic not in self.topics:
                    raise ValueError(
                        f"processors[{index}].tables.{name}.topic: topic '{table.topic}' is not declared under topics"
                    )
                if "compact" not in self.topics[table.topic].cleanup_policy:
                    raise ValueError(
                        f"processors[{index}].tables.{name}.topic: topic '{table.topic}' is not compacted "
                        "(cleanup_policy: compact): a table's topic keeps every key's latest value"
                    )
                if table.history_ms is not None and self.topics[table.topic].timestamp is not None:
                    raise ValueError(
                        f"processors[{index}].tables.{name}.history_ms: topic '{table.topic}' has a timestamp "
                        "setting; a table's versions are kept by their records' Kafka timestamps"
                    )
            counts = {topic: self.topics[topic].partitions for topic in (*processor.inputs, *processor.table_topics())}
            if len(set(counts.values())) > 1:
                raise ValueError(
                    f"processors[{index}].inputs: inputs of one processor must be co-partitioned "
                    f"(same number of partitions), got {counts}; an input every task reads whole is "
                    "listed under broadcast"
                )
            if processor.chooses_records:
                for topic in processor.broadcast:
                    if self.topics[topic].partitions != 1:
                        raise ValueError(
                            f"processors[{index}].broadcast: topic '{topic}' has {self.topics[topic].partitions} "
                            "partitions; a merge processor's broadcast inputs have one, so that a topic names "
                            "one queue of its task"
                        )
        store_owners: dict[str, str] = {}
        for index, processor in enumerate(self.processors):
            for table_store in processor.tables:
                if table_store in store_owners:
                    raise ValueError(
                        f"processors[{index}].tables.{table_store}: the name is already used by processor "
                        f"'{store_owners[table_store]}' (store names are app-wide)"
                    )
                store_owners[table_store] = processor.name
            for store, spec in processor.stores.items():
                if store in store_owners:
                    raise ValueError(
                        f"processors[{index}].stores.{store}: the name is already used by processor "
                        f"'{store_owners[store]}' (store names are app-wide: they name changelog topics)"
                    )
                store_owners[store] = processor.name
                if spec.changelog:
                    derived_topic(f"processors[{index}].stores.{store}", "changelog", self.changelog_topic(store))
        check_registry_topics(self.topics, self.schema_registry)
        for name, outbox in self.outboxes.items():
            if not re.match(NAME, name):
                raise ValueError(f"outboxes.{name}: the name may only use letters, digits, '_' and '-'")
            if outbox.topic is not None and outbox.topic not in self.topics:
                raise ValueError(f"outboxes.{name}.topic: topic '{outbox.topic}' is not declared under topics")
        for name, follower in self.table_followers.items():
            if not re.match(NAME, name):
                raise ValueError(f"table_followers.{name}: the name may only use letters, digits, '_' and '-'")
            if follower.topic not in self.topics:
                raise ValueError(f"table_followers.{name}.topic: topic '{follower.topic}' is not declared under topics")
            if "compact" not in self.topics[follower.topic].cleanup_policy:
                raise ValueError(
                    f"table_followers.{name}.topic: topic '{follower.topic}' is not compacted "
                    "(cleanup_policy: compact): it keeps each row's latest version"
                )
        if self.queries is not None:
            self.queries.check_served_by(self.health)
        for name in self.global_stores:
            if not re.match(NAME, name):
                raise ValueError(f"global_stores.{name}: the name may only use letters, digits, '_' and '-'")
        needs_dead_letters = ErrorPolicy.DEAD_LETTER in (self.errors.deserialization, self.errors.processing) or any(
            spec.errors == "dead_letter" for spec in self.global_stores.values()
        )
        if needs_dead_letters and self.dead_letter_topic not in self.topics:
            derived_topic("app_id", "dead-letter", self.dead_letter_topic)
            # The dead-letter topic always exists as bytes, whatever the app's serdes are.
            self.topics[self.dead_letter_topic] = self.internal_topics.topic(
                partitions=1, key_serde="bytes", value_serde="bytes"
            )
            self._derived_topics.add(self.dead_letter_topic)
        return self

    def _put_rekeying_in_front(self) -> None:
        """Each processor with `repartition:` reads the app's topic `<app>-<name>-repartition` instead of its
        inputs, and a stage `<name>-repartition` (processors.repartition:Rekey) in front of it reads those
        and writes that topic under the new key, in the topic's partitions by Kafka's partitioner."""
        for index, processor in reversed(list(enumerate(self.processors))):
            if processor.repartition is None or processor.repartition_topic is not None:
                continue
            for topic in processor.inputs:
                if topic not in self.topics:
                    raise ValueError(f"processors[{index}].inputs: topic '{topic}' is not declared under topics")
            topic = self.repartition_topic(processor.name)
            derived_topic(f"processors[{index}].repartition", "repartition", topic)
            if topic in self.topics:
                raise ValueError(f"processors[{index}].repartition: the topic {topic} is declared under topics")
            partitions = processor.repartition.partitions or self.topics[processor.inputs[0]].partitions
            self.topics[topic] = self.internal_topics.topic(
                partitions=partitions, key_serde=processor.repartition.key_serde, value_serde="msgpack"
            )
            self._derived_topics.add(topic)
            stage = ProcessorConfig.model_validate(
                {
                    "name": f"{processor.name}-repartition",
                    "class": "processors.repartition:Rekey",
                    "inputs": processor.inputs,
                    "outputs": [topic],
                    "params": {"key": processor.repartition.key, "output": topic},
                }
            )
            self.processors[index] = processor.reading_repartition(topic)
            self.processors.insert(index, stage)

    def derived_topics(self) -> set[str]:
        """The topics of `topics` the runtime added itself (repartition, dead letters): created, like
        changelogs, with `internal_topics`."""
        return set(self._derived_topics)

    def outbox_position_topic(self, outbox: str) -> str:
        """Where the outbox's poller keeps the last id it shipped (compacted; one partition)."""
        return f"{self.app_id}-outbox-{outbox}-position"

    def singletons_topic(self) -> str:
        """The one-partition topic whose owner in each singleton's own group runs that singleton."""
        return f"{self.app_id}-singletons"

    def singleton_group(self, kind: str, name: str) -> str:
        """The consumer group that elects the process running one outbox or table follower."""
        return f"{self.app_id}-singleton-{kind}-{name}"

    def replay_requests_topic(self) -> str:
        return self.replay_jobs.requests_topic or f"{self.app_id}-replay-requests"

    def replay_jobs_topic(self) -> str:
        """Every replay job's latest state (compacted; one partition)."""
        return self.replay_jobs.jobs_topic or f"{self.app_id}-replay-jobs"

    def follower_position_topic(self, follower: str) -> str:
        """Where the table follower keeps the (version, key) it reached (compacted; one partition)."""
        return f"{self.app_id}-follower-{follower}-position"

    def repartition_topic(self, processor: str) -> str:
        return f"{self.app_id}-{processor}-repartition"

    def repartition_topics(self) -> list[str]:
        return [p.repartition_topic for p in self.processors if p.repartition_topic is not None]

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
        """The topics the consumer group reads: every processor's partitioned inputs and tables."""
        return sorted({topic for p in self.processors for topic in (*p.inputs, *p.table_topics())})

    def broadcast_topics(self) -> list[str]:
        """The topics every task of a processor reads whole, outside the consumer group."""
        return sorted({topic for processor in self.processors for topic in processor.broadcast})
