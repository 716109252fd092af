"""What the examples run against: KAFKA_BOOTSTRAP_SERVERS, else the local development broker; DATABASE_URL, else
the local development PostgreSQL."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from runtime.devkafka import managed


@contextlib.contextmanager
def kafka(keep_broker: bool = False) -> Iterator[str]:
    """Yields the bootstrap servers; a broker started here is stopped at the end unless `keep_broker`."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap:
        yield bootstrap
        return
    print("starting the local Kafka broker (the first time downloads Kafka from Maven Central) ...", flush=True)
    broker, started = managed.start()
    print(f"Kafka at {broker.bootstrap_servers} ({'started now' if started else 'already running'})")
    try:
        yield broker.bootstrap_servers
    finally:
        if started and not keep_broker:
            print("stopping the local Kafka broker")
            managed.stop()


@contextlib.contextmanager
def database(keep: bool = False) -> Iterator[str]:
    """DATABASE_URL, else the local development PostgreSQL, which, started here, is stopped at the end unless
    `keep`; sets DATABASE_URL for the apps the example runs."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from runtime.devpostgres import managed as postgres

    server, started = postgres.start()
    print(f"PostgreSQL at {server.url} ({'started now' if started else 'already running'})")
    os.environ["DATABASE_URL"] = server.url
    try:
        yield server.url
    finally:
        del os.environ["DATABASE_URL"]
        if started and not keep:
            print("stopping the local PostgreSQL")
            postgres.stop()
