"""What an app's principal must be allowed on a cluster with an authorizer, worked out from its YAML.

Each grant names the resource and the operations the runtime uses there, grouped by what they are
for. Kafka's authorizer lets Read, Write, Delete and Alter imply Describe, but every grant still lists
Describe where it is needed, so that taking one operation away does not silently take another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from runtime.config import AppConfig, ErrorPolicy, Guarantee, KafkaConfig

CLUSTER = "kafka-cluster"  # the one name a cluster resource has


class Resource(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"
    CLUSTER = "cluster"


@dataclass(frozen=True)
class Grant:
    """Operations on resources of one type: each name literal, or every name starting with it (prefixed)."""

    resource: Resource
    names: tuple[str, ...]
    operations: tuple[str, ...]
    prefixed: bool = False


@dataclass(frozen=True)
class Purpose:
    """Grants that serve one purpose, with a line saying which; a note says when they may be left out."""

    what: str
    grants: list[Grant]
    note: str | None = None


@dataclass
class _Topics:
    """The topics of one purpose and the operations each needs, kept in the order they were named."""

    operations: dict[str, list[str]] = field(default_factory=dict)

    def add(self, topic: str, *operations: str) -> None:
        known = self.operations.setdefault(topic, [])
        known += [operation for operation in operations if operation not in known]

    def grants(self) -> list[Grant]:
        """One grant per set of operations, naming every topic that needs exactly those."""
        by_operations: dict[tuple[str, ...], list[str]] = {}
        for topic, operations in self.operations.items():
            by_operations.setdefault(tuple(operations), []).append(topic)
        return [Grant(Resource.TOPIC, tuple(topics), ops) for ops, topics in by_operations.items()]


READ = ("Read", "Describe", "DescribeConfigs")
WRITE = ("Write", "Describe", "DescribeConfigs")
INTERNAL = ("Create", "Read", "Write", "Describe", "DescribeConfigs")


def principal(kafka: KafkaConfig) -> str | None:
    """The principal the broker sees, where the YAML tells it: the SASL user name of PLAIN and SCRAM."""
    sasl = kafka.security.sasl
    return None if sasl is None or sasl.username is None else f"User:{sasl.username}"


def app_permissions(app: AppConfig, replay_jobs: bool = False, rewind: bool = False) -> list[Purpose]:
    """Every grant `python -m runtime app.yaml` needs; with `replay_jobs` and `rewind`, those of the
    `replay-jobs` and `rewind` commands too."""
    purposes = [
        Purpose(
            f"the consumer group {app.group_id}: the workers join it and commit its offsets; commands read it",
            [Grant(Resource.GROUP, (app.group_id,), ("Read", "Describe"))],
        ),
        *_declared_topics(app),
        *_internal_topics(app),
    ]
    if app.outboxes or app.table_followers:
        purposes.append(_singletons(app))
    if replay_jobs:
        purposes.append(_replay_jobs(app))
    if rewind:
        purposes.append(
            Purpose(
                "rewind: the rewinds topic records each rewind",
                [Grant(Resource.TOPIC, (f"{app.app_id}-rewinds",), ("Create", "Read", "Write", "Describe"))],
            )
        )
    if _transactional(app, replay_jobs):
        purposes.append(
            Purpose(
                f"transactions: the ids {app.app_id}-<processor>-<partition> of exactly-once tasks, "
                f"{app.app_id}-outbox-<name> and {app.app_id}-follower-<name>, {app.app_id}-replay-<job>",
                [Grant(Resource.TRANSACTIONAL_ID, (f"{app.app_id}-",), ("Write", "Describe"), prefixed=True)],
            )
        )
    purposes.append(
        Purpose(
            "the cluster: the broker's default replication factor, for topics created with replication_factor -1 "
            "(and its session timeout bounds, checked at start when it may be read)",
            [Grant(Resource.CLUSTER, (CLUSTER,), ("DescribeConfigs",))],
            note="leave it out only if every topic the runtime creates has a replication_factor, internal_topics too",
        )
    )
    purposes.append(
        Purpose(
            "the cluster: idempotent producers, on brokers before Kafka 3.0 only (later, Write on a topic is enough)",
            [Grant(Resource.CLUSTER, (CLUSTER,), ("IdempotentWrite",))],
        )
    )
    return purposes


def _declared_topics(app: AppConfig) -> list[Purpose]:
    """The topics the YAML names: read by the group, read whole, written; created when missing (`create_topics`)."""
    derived = app.derived_topics()
    create = ("Create",) if app.create_topics else ()
    reads, whole, writes = _Topics(), _Topics(), _Topics()
    for topic in app.input_topics():
        if topic not in derived:
            reads.add(topic, *READ, *create)
    for topic in app.broadcast_topics():
        whole.add(topic, *READ, *create)
    for spec in app.global_stores.values():
        whole.add(spec.topic, *READ, *(create if spec.topic in app.topics else ()))
    written = [topic for processor in app.processors for topic in processor.outputs]
    written += [outbox.topic for outbox in app.outboxes.values() if outbox.topic is not None]
    written += [follower.topic for follower in app.table_followers.values()]
    for topic in written:
        if topic not in derived:
            writes.add(topic, *WRITE, *create)
    purposes = [
        purpose
        for purpose in (
            Purpose("input topics: the group's inputs and tables", reads.grants()),
            Purpose("topics read whole: broadcast inputs and global stores", whole.grants()),
            Purpose("output topics: processors, outboxes and table followers write them", writes.grants()),
        )
        if purpose.grants
    ]
    by_column = sorted(name for name, outbox in app.outboxes.items() if outbox.topic_column is not None)
    if by_column:
        purposes.append(
            Purpose(
                f"outboxes {', '.join(by_column)} write each row to the topic its topic_column names: grant Write, "
                "Describe and DescribeConfigs on those topics too",
                [],
            )
        )
    return purposes


def _internal_topics(app: AppConfig) -> list[Purpose]:
    """The topics the runtime names after the app and creates itself."""
    internal = _Topics()
    for processor in app.processors:
        for store, spec in processor.stores.items():
            if spec.changelog:
                internal.add(app.changelog_topic(store), *INTERNAL)
    for topic in app.repartition_topics():
        internal.add(topic, *INTERNAL, "Delete")  # Delete: the records read are purged (DeleteRecords)
    dead_letters = ErrorPolicy.DEAD_LETTER in (app.errors.deserialization, app.errors.processing) or any(
        spec.errors == "dead_letter" for spec in app.global_stores.values()
    )
    if dead_letters:
        internal.add(app.dead_letter_topic, "Create", *WRITE)
    for name in app.outboxes:
        internal.add(app.outbox_position_topic(name), *INTERNAL)
    for name in app.table_followers:
        internal.add(app.follower_position_topic(name), *INTERNAL)
    if not internal.operations:
        return []
    what = "topics the runtime creates: changelogs, repartition topics (purged once read), dead letters, positions"
    return [Purpose(what, internal.grants())]


def _singletons(app: AppConfig) -> Purpose:
    return Purpose(
        "the election of the one process that runs each outbox and table follower: its topic and groups",
        [
            Grant(Resource.TOPIC, (app.singletons_topic(),), ("Create", "Read", "Describe")),
            Grant(Resource.GROUP, (f"{app.app_id}-singleton-",), ("Read", "Describe"), prefixed=True),
        ],
    )


def _replay_jobs(app: AppConfig) -> Purpose:
    return Purpose(
        "replay jobs (python -m runtime replay-jobs): requests, jobs, and the group that takes requests",
        [
            Grant(
                Resource.TOPIC,
                (app.replay_requests_topic(), app.replay_jobs_topic()),
                ("Create", "Read", "Write", "Describe"),
            ),
            Grant(Resource.GROUP, (f"{app.app_id}-replay-intake",), ("Read", "Describe")),
        ],
    )


def _transactional(app: AppConfig, replay_jobs: bool) -> bool:
    return app.guarantee is Guarantee.EXACTLY_ONCE or bool(app.outboxes or app.table_followers) or replay_jobs


def topic_operations(app: AppConfig) -> dict[str, str]:
    """What the runtime does with each topic, as an authorization error names it: Read, Write, or both."""
    done: dict[str, list[str]] = {}
    for purpose in app_permissions(app):
        for grant in purpose.grants:
            if grant.resource is Resource.TOPIC:
                for topic in grant.names:
                    known = done.setdefault(topic, [])
                    known += [op for op in ("Read", "Write") if op in grant.operations and op not in known]
    return {topic: " and ".join(operations) for topic, operations in done.items() if operations}
