"""Integration tests stop what they start, also when they fail half-way."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.integration.running import SPAWNED


@pytest.fixture(autouse=True)
def stop_spawned_workers() -> Iterator[None]:
    yield
    while SPAWNED:
        process = SPAWNED.pop()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: --workers children too
            process.wait()
