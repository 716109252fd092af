"""Shared fixtures: one real Kafka broker per test session, and unique topic names per test."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime.devkafka import LocalBroker
from runtime.devpostgres.server import throwaway


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """KAFKA_BOOTSTRAP_SERVERS when set, else a broker started for this test session."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    with LocalBroker(data_dir=Path(tmp_path_factory.mktemp("kafka"))) as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """DATABASE_URL when set, else a PostgreSQL cluster made and started for this test session (Debian's
    package; under the system's temporary directory, which the server's own user can reach as root)."""
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    with throwaway() as server:
        yield server.url


TopicNamer = Callable[[str], str]


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> TopicNamer:
    """Names unique to this test: `topic_name("payments")` -> `test_x-1a2b3c4d-payments`."""
    prefix = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:80]
    suffix = uuid.uuid4().hex[:8]
    return lambda name: f"{prefix}-{suffix}-{name}"
