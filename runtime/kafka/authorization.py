"""Kafka's authorization errors, wherever a client raised them, told as the permission and resource to grant.

aiokafka raises a refusal as an error of the resource's type that names the resource only; which
operation was refused follows from the type (a group is joined: Read; a transactional id initialized:
Write; the cluster, for an idempotent producer on a broker before 3.0: IdempotentWrite) or, for a topic,
from what the app does with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from runtime.config import AppConfig, KafkaConfig
from runtime.errors import AccessDenied
from runtime.kafka.permissions import CLUSTER, Resource, principal, topic_operations

AUTHORIZATION_ERRORS = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailedError,
)
UNNAMED = "the app's principal"  # a certificate's or a token's: the YAML does not say which
# The operation each refusal stands for, but a topic's (which depends on the topic).
OPERATIONS: dict[type[Exception], tuple[Resource, str]] = {
    GroupAuthorizationFailedError: (Resource.GROUP, "Read"),
    TransactionalIdAuthorizationFailed: (Resource.TRANSACTIONAL_ID, "Write"),
    ClusterAuthorizationFailedError: (Resource.CLUSTER, "IdempotentWrite"),
}


class RefusedOperation(Exception):
    """A refusal the runtime read from a response's error code, where it knows the operation it asked for."""

    def __init__(self, resource: Resource, operation: str, name: str):
        super().__init__(f"{operation} on {resource} '{name}' refused")
        self.resource, self.operation, self.name = resource, operation, name


@dataclass(frozen=True)
class Authorization:
    """Who the app's clients are at which cluster, and what they do with each topic (`other_topics`: with
    those `topic_operations` does not name)."""

    broker: str
    principal: str = UNNAMED
    topic_operations: Mapping[str, str] = field(default_factory=dict)
    other_topics: str = "Describe"

    @classmethod
    def of(cls, broker: str, kafka: KafkaConfig, app: AppConfig | None) -> Authorization:
        operations = topic_operations(app) if app is not None else {}
        return cls(broker, principal(kafka) or UNNAMED, operations)

    def translated(self, error: BaseException) -> BaseException:
        """`error` as an `AccessDenied` when an authorization error caused it; otherwise `error` itself."""
        refusal = next(_authorization_errors(error, set()), None)
        if refusal is None:
            return error
        if isinstance(refusal, RefusedOperation):
            return AccessDenied(self.broker, self.principal, refusal.operation, refusal.resource, refusal.name)
        if isinstance(refusal, TopicAuthorizationFailedError):
            topic = _named(refusal)
            operation = self.topic_operations.get(topic, self.other_topics)
            return AccessDenied(self.broker, self.principal, operation, Resource.TOPIC, topic)
        resource, operation = next(op for kind, op in OPERATIONS.items() if isinstance(refusal, kind))
        name = CLUSTER if resource is Resource.CLUSTER else _named(refusal)
        return AccessDenied(self.broker, self.principal, operation, resource, name)


def _authorization_errors(error: BaseException, seen: set[int]) -> Iterator[BaseException]:
    """The authorization errors in `error`, what it was raised from, and the errors it groups."""
    if id(error) in seen:
        return
    seen.add(id(error))
    if isinstance(error, (*AUTHORIZATION_ERRORS, RefusedOperation)):
        yield error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _authorization_errors(inner, seen)
    for cause in (error.__cause__, error.__context__):
        if cause is not None:
            yield from _authorization_errors(cause, seen)


def _named(refusal: BaseException) -> str:
    """The resource a refusal names: aiokafka gives one name, or a set of topics (the first is told)."""
    if not refusal.args:
        return "?"
    named = refusal.args[0]
    return str(sorted(named)[0]) if isinstance(named, set | frozenset) and named else str(named)
