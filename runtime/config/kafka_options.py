"""The YAML's option maps for aiokafka, checked against the clients' own constructors.

What a client accepts is read from its constructor's signature, so the check follows aiokafka's
version; a value's type is the type of the constructor's default (or annotation) where it has one.
Options the runtime sets itself are refused with the reason, rather than silently overridden.
"""

from __future__ import annotations

import difflib
import inspect
import types
from collections.abc import Iterator, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

INT32_MAX = 2**31 - 1
SIMPLE_TYPES = (bool, int, float, str)

_CONSTRUCTORS: dict[str, type] = {
    "consumer": AIOKafkaConsumer,
    "producer": AIOKafkaProducer,
    "admin client": AIOKafkaAdminClient,
}

# Set by the runtime for every client, or for the one client that needs it: why a user must not.
RUNTIME_CONTROLLED: dict[str, str] = {
    "bootstrap_servers": "set kafka.bootstrap_servers instead",
    "loop": "the runtime's event loop is used",
    "enable_auto_commit": "offsets are committed by the runtime, when the guarantee allows",
    "isolation_level": "the runtime reads read_committed (changelogs and exactly-once rely on it)",
    "partition_assignment_strategy": "the runtime's assignors keep co-partitioned inputs together (see `rebalance`)",
    "key_deserializer": "records are decoded by the topics' serdes",
    "value_deserializer": "records are decoded by the topics' serdes",
    "key_serializer": "records are encoded by the topics' serdes",
    "value_serializer": "records are encoded by the topics' serdes",
    "partitioner": "the runtime partitions outputs itself (murmur2, as Kafka's Java clients)",
    "transactional_id": "exactly_once gives every task its own transactional id (set guarantee)",
    "transaction_timeout_ms": "set the top-level transaction_timeout_ms instead",
    "group_instance_id": "set kafka.group_instance_id instead: each worker joins with its own index appended",
}
# How a client reaches a secured cluster: set once for every client, under kafka.security.
SECURITY: dict[str, str] = {
    "security_protocol": "kafka.security.protocol",
    "ssl_context": "kafka.security.tls (ca_file, cert_file, key_file, key_password, check_hostname)",
    "sasl_mechanism": "kafka.security.sasl.mechanism",
    "sasl_plain_username": "kafka.security.sasl.username",
    "sasl_plain_password": "kafka.security.sasl.password",
    "sasl_oauth_token_provider": "kafka.security.sasl.oauth (token_endpoint, client_id, client_secret, scope)",
    "sasl_kerberos_service_name": "kafka.security.sasl.kerberos_service_name",
    "sasl_kerberos_domain_name": "kafka.security.sasl.kerberos_domain_name",
}
SECURITY_LIKE = ("ssl_", "sasl_", "tls_")


def _parameters(constructor: type) -> dict[str, inspect.Parameter]:
    signature = inspect.signature(constructor)
    return {name: p for name, p in signature.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


_ACCEPTED = {client: _parameters(constructor) for client, constructor in _CONSTRUCTORS.items()}
# kafka.client goes to every client, so it may only hold what all of them accept.
_SHARED = set.intersection(*(set(parameters) for parameters in _ACCEPTED.values()))
_EXPLAINED = {
    "kafka.client": "every aiokafka client",
    "kafka.consumer": "aiokafka's consumer",
    "kafka.producer": "aiokafka's producer",
}


def _expected_type(name: str) -> type | None:
    """The simple type the constructors' defaults or annotations give the option, if any."""
    found: set[type] = set()
    for parameters in _ACCEPTED.values():
        parameter = parameters.get(name)
        if parameter is None:
            continue
        if type(parameter.default) in SIMPLE_TYPES:
            found.add(type(parameter.default))
        annotation = parameter.annotation
        members = annotation.__args__ if isinstance(annotation, types.UnionType) else (annotation,)
        found.update(member for member in members if member in SIMPLE_TYPES)
    return found.pop() if len(found) == 1 else None


def _accepted(section: str) -> set[str]:
    if section == "kafka.client":
        return _SHARED
    return set(_ACCEPTED["consumer" if section == "kafka.consumer" else "producer"])


def option_problems(section: str, options: Mapping[str, Any]) -> Iterator[str]:
    """What is wrong with `kafka.client`, `kafka.consumer` or `kafka.producer`, one line per option."""
    accepted = _accepted(section)
    for name, value in options.items():
        path = f"{section}.{name}"
        if name in RUNTIME_CONTROLLED:
            yield f"{path}: set by the runtime, not in the YAML: {RUNTIME_CONTROLLED[name]}"
        elif name in SECURITY:
            yield f"{path}: security is set for every client in one place: set {SECURITY[name]} instead"
        elif name.startswith(SECURITY_LIKE) and name not in accepted:
            yield f"{path}: not an option of {_EXPLAINED[section]}; TLS and SASL are set under kafka.security"
        elif name not in accepted:
            yield f"{path}: not an option of {_EXPLAINED[section]}{_suggestion(name, accepted)}"
        else:
            yield from _value_problems(path, name, value)


def _suggestion(name: str, accepted: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(accepted - set(RUNTIME_CONTROLLED)), n=1, cutoff=0.75)
    if close:
        return f" (did you mean {close[0]}?)"
    for client in ("consumer", "producer"):
        if name in _ACCEPTED[client]:
            return f" (an option of the {client}: set it under kafka.{client})"
    return ""


def _value_problems(path: str, name: str, value: Any) -> Iterator[str]:
    expected = _expected_type(name)
    if expected is None or value is None:
        return
    fits = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        fits = True
    if not fits:
        yield f"{path}: expected {_type_name(expected)}, got {_type_name(type(value))}"
    elif expected is int and not 0 <= value <= INT32_MAX:
        yield f"{path}: {value} is outside 0..{INT32_MAX} (Kafka's 32-bit fields)"


def _type_name(kind: type) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, kind.__name__)
