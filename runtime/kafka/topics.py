"""Make sure the app's topics exist with the partition counts its processors rely on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from runtime.config import AppConfig, ConfigError, TopicConfig
from runtime.kafka.record_limits import DEFAULT_MAX_REQUEST_SIZE, Limits, TopicLimits

log = logging.getLogger(__name__)

UNKNOWN_TOPIC = 3
TOPIC_EXISTS = 36


def declared_configs(topic: TopicConfig) -> dict[str, str]:
    return {"cleanup.policy": topic.cleanup_policy, **topic.config}


async def describe_partitions(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """Partition counts of the topics that exist."""
    described: list[dict[str, Any]] = await admin.describe_topics(topics)
    return {entry["topic"]: len(entry["partitions"]) for entry in described if entry["error_code"] == 0}


async def describe_limits(admin: AIOKafkaAdminClient, config: AppConfig, topics: list[str]) -> Limits:
    """What each topic takes from the app's producer (read once at start: the broker's answer to a record
    above it would fail its whole batch). The broker checks a compressed batch after compression, so
    with compression only the producer's own `max_request_size` bounds a record here."""
    max_request_size = int(producer_options(config).get("max_request_size", DEFAULT_MAX_REQUEST_SIZE))
    wanted = {"max.message.bytes": None, "cleanup.policy": None}
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic, wanted) for topic in topics]
    limits: dict[str, TopicLimits] = {}
    for response in await admin.describe_configs(resources) if resources else []:
        for code, message, _, topic, entries in response.resources:
            if code != 0:
                log.warning(
                    "the configuration of topic %s could not be read (%s, error %d): its records are checked "
                    "against the producer's max_request_size only",
                    topic,
                    message,
                    code,
                )
                limits[topic] = TopicLimits(max_request_size)
                continue
            limits[topic] = topic_limits(config, {entry[0]: entry[1] for entry in entries})
    return limits


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


async def ensure_topics(admin: AIOKafkaAdminClient, config: AppConfig) -> dict[str, int]:
    """Create missing topics (when allowed) and changelogs; return every topic's partition count."""
    counts = await _ensure_declared(admin, config)
    return {**counts, **await _ensure_changelogs(admin, config, counts), **await _global_topics(admin, config)}


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


async def _ensure_changelogs(admin: AIOKafkaAdminClient, config: AppConfig, counts: dict[str, int]) -> dict[str, int]:
    """One compacted changelog per store, with as many partitions as its processor's inputs."""
    wanted = changelog_partitions(config, counts)
    if not wanted:
        return {}
    existing = await describe_partitions(admin, sorted(wanted))
    for topic, (partitions, processor_name) in wanted.items():
        if topic in existing and existing[topic] != partitions:
            raise ConfigError(
                f"changelog topic {topic} has {existing[topic]} partitions, but the inputs of processor "
                f"'{processor_name}' have {partitions}: delete the changelog (and the app's state) or fix the inputs"
            )
    missing = [
        NewTopic(topic, partitions, 1, topic_configs={"cleanup.policy": "compact"})
        for topic, (partitions, _) in wanted.items()
        if topic not in existing
    ]
    if missing:
        response = await admin.create_topics(missing)
        for topic, code, message in response.topic_errors:
            if code not in (0, TOPIC_EXISTS):
                raise ConfigError(f"changelog topic {topic} could not be created: {message} (error {code})")
            log.info("created changelog topic %s", topic)
    return await _wait_for_partitions(admin, sorted(wanted))


async def _ensure_declared(admin: AIOKafkaAdminClient, config: AppConfig) -> dict[str, int]:
    names = sorted(config.topics)
    counts = await describe_partitions(admin, names)
    missing = [name for name in names if name not in counts]
    if missing and not config.create_topics:
        raise ConfigError(f"topics: {', '.join(missing)} do not exist and create_topics is false")
    if missing:
        new = [
            NewTopic(
                name,
                config.topics[name].partitions,
                config.topics[name].replication_factor,
                topic_configs=declared_configs(config.topics[name]),
            )
            for name in missing
        ]
        response = await admin.create_topics(new)
        for topic, code, message in response.topic_errors:
            if code not in (0, TOPIC_EXISTS):
                raise ConfigError(f"topics.{topic}: could not be created: {message} (error {code})")
            if code == 0:
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


async def ensure_internal_topics(admin: AIOKafkaAdminClient, wanted: Sequence[NewTopic]) -> dict[str, int]:
    """Create those of `wanted` (topics of the runtime's own, not declared by the app) that do not exist;
    every one's partition count."""
    names = sorted(topic.name for topic in wanted)
    existing = await describe_partitions(admin, names)
    missing = [topic for topic in wanted if topic.name not in existing]
    if missing:
        response = await admin.create_topics(missing)
        for topic, code, message in response.topic_errors:
            if code not in (0, TOPIC_EXISTS):
                raise ConfigError(f"topic {topic} could not be created: {message} (error {code})")
            if code == 0:
                log.info("created topic %s", topic)
    return await _wait_for_partitions(admin, names)


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
