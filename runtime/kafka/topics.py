"""Make sure the app's topics exist with the partition counts its processors rely on, and the
runtime's own topics with the replicas `internal_topics` asks."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from runtime.config import AppConfig, ConfigError, InternalTopicsConfig, TopicConfig
from runtime.kafka.authorization import RefusedOperation
from runtime.kafka.permissions import CLUSTER, Resource
from runtime.kafka.record_limits import DEFAULT_MAX_REQUEST_SIZE, Limits, TopicLimits
from stores.replication import BrokerDefaultUnknown, ReplicationFactors

log = logging.getLogger(__name__)

UNKNOWN_TOPIC = 3
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
TOPIC_EXISTS = 36
INVALID_REPLICATION_FACTOR = 38


def declared_configs(topic: TopicConfig) -> dict[str, str]:
    return {"cleanup.policy": topic.cleanup_policy, **topic.config}


async def describe_partitions(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """Partition counts of the topics that exist."""
    return {topic: shape.partitions for topic, shape in (await describe_shapes(admin, topics)).items()}


async def describe_limits(admin: AIOKafkaAdminClient, config: AppConfig, topics: list[str]) -> Limits:
    """What each topic takes from the app's producer (read once at start: the broker's answer to a record
    above it would fail its whole batch). The broker checks a compressed batch after compression, so
    with compression only the producer's own `max_request_size` bounds a record here. On a cluster the
    broker asked may not know yet a topic that another has just created: it is asked again, as long as
    `_wait_for_partitions` would wait."""
    max_request_size = int(producer_options(config).get("max_request_size", DEFAULT_MAX_REQUEST_SIZE))
    limits: dict[str, TopicLimits] = {}
    unread: dict[str, ReadConfigs] = {}
    pending, deadline, pause = list(topics), time.monotonic() + METADATA_WAIT_S, 0.01
    while pending:
        for read in await _read_configs(admin, pending):
            if read.code == 0:
                limits[read.topic] = topic_limits(config, read.configs)
                unread.pop(read.topic, None)
            else:
                unread[read.topic] = read
        pending = [topic for topic, read in unread.items() if read.code == UNKNOWN_TOPIC]
        if not pending or time.monotonic() >= deadline:
            break
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)
    for read in unread.values():
        log.warning(
            "the configuration of topic %s could not be read (%s, error %d): its records are checked against "
            "the producer's max_request_size only",
            read.topic,
            read.message,
            read.code,
        )
        limits[read.topic] = TopicLimits(max_request_size)
    return limits


@dataclass(frozen=True)
class ReadConfigs:
    """A broker's answer about one topic: an error code and message, or its configs."""

    topic: str
    code: int
    message: str
    configs: dict[str, str]


async def _read_configs(admin: AIOKafkaAdminClient, topics: list[str]) -> list[ReadConfigs]:
    wanted = {"max.message.bytes": None, "cleanup.policy": None}
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic, wanted) for topic in topics]
    return [
        ReadConfigs(topic, code, message, {entry[0]: entry[1] for entry in entries})
        for response in await admin.describe_configs(resources)
        for code, message, _, topic, entries in response.resources
    ]


def producer_options(config: AppConfig) -> dict[str, Any]:
    return {**config.kafka.client, **config.kafka.producer}


def topic_limits(config: AppConfig, topic_configs: Mapping[str, str | None]) -> TopicLimits:
    """What a topic with these settings (`max.message.bytes`, `cleanup.policy`) takes from the app's producer."""
    producer = producer_options(config)
    max_bytes = int(producer.get("max_request_size", DEFAULT_MAX_REQUEST_SIZE))
    compressed = producer.get("compression_type") not in (None, "none")
    if not compressed and topic_configs.get("max.message.bytes"):
        max_bytes = min(max_bytes, int(str(topic_configs["max.message.bytes"])))
    compacted = "compact" in str(topic_configs.get("cleanup.policy", "")).split(",")
    return TopicLimits(max_bytes, needs_key=compacted)


@dataclass(frozen=True)
class InternalTopic:
    """A topic of the runtime's own that the app does not declare (positions, replay jobs, rewinds)."""

    name: str
    partitions: int = 1
    compacted: bool = False


@dataclass(frozen=True)
class TopicShape:
    partitions: int
    replicas: int  # the fewest any of its partitions has


@dataclass(frozen=True)
class Replication:
    """What a topic is created with, and the YAML field that asks it, for the messages that name it."""

    asked: int
    setting: str


INTERNAL = "internal_topics.replication_factor"


async def describe_shapes(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, TopicShape]:
    """Partitions and replicas of the topics that exist."""
    described: list[dict[str, Any]] = await admin.describe_topics(topics)
    for entry in described:
        if entry["error_code"] == TOPIC_AUTHORIZATION_FAILED:
            raise RefusedOperation(Resource.TOPIC, "Describe", entry["topic"])
    return {
        entry["topic"]: TopicShape(
            len(entry["partitions"]), min((len(p["replicas"]) for p in entry["partitions"]), default=0)
        )
        for entry in described
        if entry["error_code"] == 0
    }


def topic_uses(config: AppConfig) -> dict[str, str]:
    """What each of the app's topics is to it, in words, for a message that names the topic."""
    uses: dict[str, list[str]] = defaultdict(list)
    for processor in config.processors:
        named = f"processor '{processor.name}'"
        for topic in processor.inputs:
            uses[topic].append(f"an input of {named}")
        for topic in processor.table_topics():
            uses[topic].append(f"a table of {named}")
        for topic in processor.broadcast:
            uses[topic].append(f"a broadcast input of {named}")
        for topic in processor.outputs:
            uses[topic].append(f"an output of {named}")
        for store, store_spec in processor.stores.items():
            if store_spec.changelog:
                uses[config.changelog_topic(store)].append(f"the changelog of store '{store}'")
    for name, global_spec in config.global_stores.items():
        uses[global_spec.topic].append(f"the topic of global store '{name}'")
    if config.dead_letter_topic in config.topics:
        uses[config.dead_letter_topic].append("the dead-letter topic")
    return {topic: ", ".join(words) for topic, words in uses.items()}


def named(topics: list[str], uses: Mapping[str, str]) -> str:
    """'a' (an input of processor 'p'), 'b' (...)."""
    return ", ".join(f"'{topic}' ({uses[topic]})" if topic in uses else f"'{topic}'" for topic in topics)


async def refuse_recreating_read_topics(admin: AIOKafkaAdminClient, config: AppConfig) -> None:
    """A topic the app reads that is missing after its consumer group has run was deleted (or is new to the
    app): created again by the start, it would be empty, and the app would go on as if nothing was lost. The
    broker drops the group's offsets of a deleted topic, so that the group is known is what tells it ran."""
    read = sorted({*config.input_topics(), *config.broadcast_topics()})
    existing = await describe_partitions(admin, read)
    missing = [topic for topic in read if topic not in existing]
    if not missing:
        return
    groups: list[tuple[str, str]] = await admin.list_consumer_groups()
    if config.group_id not in {group for group, _ in groups}:
        return  # the app's first run: its topics are made as usual
    raise ConfigError(
        f"topics: {named(missing, topic_uses(config))} {'does' if len(missing) == 1 else 'do'} not exist, but "
        f"consumer group '{config.group_id}' has run before: deleted while the app ran? A start does not create "
        "a topic the app has read, as it would be empty; to go on with an empty one, create it first "
        "(python -m runtime topics create --app with this YAML)"
    )


async def ensure_topics(admin: AIOKafkaAdminClient, config: AppConfig) -> dict[str, int]:
    """Create missing topics (when allowed) and changelogs; return every topic's partition count."""
    factors = ReplicationFactors(admin)
    counts = await _ensure_declared(admin, config, factors)
    changelogs = await _ensure_changelogs(admin, config, counts, factors)
    return {**counts, **changelogs, **await _global_topics(admin, config)}


async def _global_topics(admin: AIOKafkaAdminClient, config: AppConfig) -> dict[str, int]:
    """Global stores may read topics the app does not declare (another system writes them): they must exist."""
    undeclared = sorted({spec.topic for spec in config.global_stores.values()} - set(config.topics))
    if not undeclared:
        return {}
    counts = await describe_partitions(admin, undeclared)
    for name, spec in config.global_stores.items():
        if spec.topic not in counts and spec.topic not in config.topics:
            raise ConfigError(
                f"global_stores.{name}.topic: topic '{spec.topic}' does not exist "
                "(declare it under topics to have it created)"
            )
    return counts


def changelog_partitions(config: AppConfig, counts: Mapping[str, int]) -> dict[str, tuple[int, str]]:
    """Each store's changelog topic, with its partitions (as many as its processor's inputs) and its processor."""
    wanted: dict[str, tuple[int, str]] = {}
    for processor in config.processors:
        for store, spec in processor.stores.items():
            if spec.changelog:
                wanted[config.changelog_topic(store)] = (counts[processor.inputs[0]], processor.name)
    return wanted


async def _ensure_changelogs(
    admin: AIOKafkaAdminClient, config: AppConfig, counts: dict[str, int], factors: ReplicationFactors
) -> dict[str, int]:
    """One compacted changelog per store, with as many partitions as its processor's inputs."""
    wanted = changelog_partitions(config, counts)
    if not wanted:
        return {}
    existing = await describe_shapes(admin, sorted(wanted))
    for topic, (partitions, processor_name) in wanted.items():
        if topic in existing and existing[topic].partitions != partitions:
            raise ConfigError(
                f"changelog topic {topic} has {existing[topic].partitions} partitions, but the inputs of processor "
                f"'{processor_name}' have {partitions}: delete the changelog (and the app's state) or fix the inputs; "
                "to keep the state at the new count, re-partition it (docs/snapshots.md)"
            )
    changelogs = [InternalTopic(topic, partitions, compacted=True) for topic, (partitions, _) in wanted.items()]
    await _ensure_internal(admin, config.internal_topics, changelogs, existing, factors, "changelog topic")
    return await _wait_for_partitions(admin, sorted(wanted))


def _declared_replication(config: AppConfig, name: str) -> Replication:
    setting = INTERNAL if name in config.derived_topics() else f"topics.{name}.replication_factor"
    return Replication(config.topics[name].replication_factor, setting)


async def _ensure_declared(
    admin: AIOKafkaAdminClient, config: AppConfig, factors: ReplicationFactors
) -> dict[str, int]:
    names = sorted(config.topics)
    shapes = await describe_shapes(admin, names)
    counts = {name: shape.partitions for name, shape in shapes.items()}
    replication = {name: _declared_replication(config, name) for name in names}
    derived = config.derived_topics()
    await _warn_below(factors, {name: shape for name, shape in shapes.items() if name in derived}, replication)
    missing = [name for name in names if name not in counts]
    if missing and not config.create_topics:
        raise ConfigError(f"topics: {', '.join(missing)} do not exist and create_topics is false")
    if missing:
        new = [
            NewTopic(
                name,
                config.topics[name].partitions,
                await _resolve(factors, replication[name]),
                topic_configs=declared_configs(config.topics[name]),
            )
            for name in missing
        ]
        for topic in await _create(admin, new, replication, "topic"):
            log.info("created topic %s (%d partitions)", topic, config.topics[topic].partitions)
        counts = await _wait_for_partitions(admin, names)
    for name in names:
        if counts[name] != config.topics[name].partitions:
            log.warning(
                "topic %s has %d partitions, the app YAML declares %d; using %d",
                name,
                counts[name],
                config.topics[name].partitions,
                counts[name],
            )
    for index, processor in enumerate(config.processors):
        actual = {topic: counts[topic] for topic in (*processor.inputs, *processor.table_topics())}
        if len(set(actual.values())) > 1:
            raise ConfigError(
                f"processors[{index}].inputs: inputs of one processor must be co-partitioned "
                f"(same number of partitions), but the broker has {actual}"
            )
    return counts


async def ensure_internal_topics(
    admin: AIOKafkaAdminClient, settings: InternalTopicsConfig, wanted: Sequence[InternalTopic]
) -> dict[str, int]:
    """Create those of `wanted` that do not exist, as `internal_topics` says; every one's partition count."""
    names = sorted(topic.name for topic in wanted)
    existing = await describe_shapes(admin, names)
    await _ensure_internal(admin, settings, wanted, existing, ReplicationFactors(admin), "topic")
    return await _wait_for_partitions(admin, names)


def internal_topic_request(settings: InternalTopicsConfig, topic: InternalTopic, replicas: int) -> NewTopic:
    """What the cluster is asked for: `internal_topics.configs`, and compaction where the topic keeps
    each key's latest value."""
    configs = {**settings.configs, **({"cleanup.policy": "compact"} if topic.compacted else {})}
    return NewTopic(topic.name, topic.partitions, replicas, topic_configs=configs)


async def _ensure_internal(
    admin: AIOKafkaAdminClient,
    settings: InternalTopicsConfig,
    wanted: Sequence[InternalTopic],
    existing: Mapping[str, TopicShape],
    factors: ReplicationFactors,
    what: str,
) -> None:
    internal = Replication(settings.replication_factor, INTERNAL)
    replication = {topic.name: internal for topic in wanted}
    await _warn_below(factors, existing, replication)
    missing = [topic for topic in wanted if topic.name not in existing]
    if missing:
        replicas = await _resolve(factors, internal)
        new = [internal_topic_request(settings, topic, replicas) for topic in missing]
        for name in await _create(admin, new, replication, what):
            log.info("created %s %s (%d replicas)", what, name, replicas)


async def _resolve(factors: ReplicationFactors, replication: Replication) -> int:
    try:
        return await factors.resolve(replication.asked)
    except BrokerDefaultUnknown as error:
        if error.code == CLUSTER_AUTHORIZATION_FAILED:
            raise RefusedOperation(Resource.CLUSTER, "DescribeConfigs", CLUSTER) from error
        raise ConfigError(
            f"{replication.setting}: -1 asks for the broker's default.replication.factor, which it did not tell "
            f"({error}): set a number of replicas"
        ) from error


async def _warn_below(
    factors: ReplicationFactors, existing: Mapping[str, TopicShape], replication: Mapping[str, Replication]
) -> None:
    """An internal topic made before (by hand, or with another setting) keeps its replicas: one line each
    where they are fewer than asked, since a lost broker can then lose the state it holds."""
    for topic, shape in sorted(existing.items()):
        try:
            asked = await factors.resolve(replication[topic].asked)
        except BrokerDefaultUnknown:  # a topic that exists needs no default: nothing to compare with
            return
        if shape.replicas < asked:
            log.warning(
                "topic %s has %d replica%s, fewer than the %d %s asks: it is left as it is "
                "(kafka-reassign-partitions adds replicas)",
                topic,
                shape.replicas,
                "" if shape.replicas == 1 else "s",
                asked,
                replication[topic].setting,
            )


async def _create(
    admin: AIOKafkaAdminClient, new: list[NewTopic], replication: Mapping[str, Replication], what: str
) -> list[str]:
    """The topics created now (another process may have made one first); a refusal stops the app, naming
    the setting to change when it is the replication factor the cluster refused."""
    response = await admin.create_topics(new)
    replicas = {topic.name: topic.replication_factor for topic in new}
    created = []
    for topic, code, message in response.topic_errors:
        if code == INVALID_REPLICATION_FACTOR:
            raise ConfigError(
                f"{replication[topic].setting}: {what} {topic} cannot be created with {replicas[topic]} "
                f"replicas: {message}"
            )
        if code == TOPIC_AUTHORIZATION_FAILED:
            raise RefusedOperation(Resource.TOPIC, "Create", topic)
        if code not in (0, TOPIC_EXISTS):
            raise ConfigError(f"{what} {topic} could not be created: {message} (error {code})")
        if code == 0:
            created.append(topic)
    return created


METADATA_WAIT_S = 10.0
"""How long topics just created may take to show up in the cluster metadata."""


async def _wait_for_partitions(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Topics just created usually show within milliseconds: asked again after 10 ms, then twice as long
    each time up to 100 ms, a start-up waits for them no longer than it must."""
    deadline, pause = time.monotonic() + METADATA_WAIT_S, 0.01
    while True:
        counts = await describe_partitions(admin, names)
        if all(name in counts for name in names):
            return counts
        if time.monotonic() >= deadline:
            raise ConfigError(f"topics {names} were created but did not show up in the cluster metadata")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)
