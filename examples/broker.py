"""The Kafka the examples run against: KAFKA_BOOTSTRAP_SERVERS, else the local development broker."""

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
