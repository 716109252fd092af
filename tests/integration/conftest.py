"""Integration tests stop what they start, also when they fail half-way."""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Iterator

import pytest

from runtime.devkafka import LocalBroker
from runtime.devkafka.certificates import Certificates, make_certificates
from runtime.devkafka.cluster import LocalCluster
from runtime.devkafka.secured import Security
from runtime.devs3.server import LocalS3, throwaway
from tests.support.running import SPAWNED
from tests.support.schema_registry import LocalRegistry


@pytest.fixture(autouse=True)
def stop_spawned_workers() -> Iterator[None]:
    yield
    while SPAWNED:
        process = SPAWNED.pop()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: --workers children too
            process.wait()


@pytest.fixture
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of this test alone, which it may stop and start again (the session's is shared)."""
    with LocalBroker(data_dir=tmp_path_factory.mktemp("private-kafka")) as broker:
        yield broker


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three brokers on 127.0.0.1 (PLAINTEXT), each a voter of the KRaft quorum, for the tests of one module:
    they may kill, stop, wipe and restart its nodes, as long as each test leaves every node running."""
    with LocalCluster(tmp_path_factory.mktemp("kafka-cluster"), size=3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Confluent-compatible API of a real Apicurio Registry started for this test session."""
    registry = LocalRegistry(log_file=tmp_path_factory.mktemp("registry") / "registry.log")
    registry.start()
    try:
        yield registry.url
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """The session's throwaway CA and the certificates its secured servers (Kafka, PostgreSQL, a registry) use."""
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates) -> Iterator[LocalBroker]:
    """A broker with the secured listeners of runtime/devkafka/secured.py, shared by the session's tests: its
    `security` holds the throwaway CA's files and the users `admin` and `alice` with their passwords."""
    users = {"admin": secrets.token_hex(12), "alice": secrets.token_hex(12)}
    with LocalBroker(
        data_dir=tmp_path_factory.mktemp("secured-kafka"), security=Security(certificates, users)
    ) as broker:
        yield broker


@pytest.fixture(scope="session")
def object_store() -> Iterator[LocalS3]:
    """A real S3-compatible server on 127.0.0.1 (runtime/devs3/), with its own access key, for the session."""
    with throwaway() as server:
        yield server
