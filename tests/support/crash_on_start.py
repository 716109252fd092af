"""A processor module that SIGKILLs the worker importing it when that worker's index (under `--workers N`)
is the one in CRASHING_WORKER: a worker that dies at every start, before it joins the group."""

from __future__ import annotations

import os
import signal

from runtime.worker.supervisor import WORKER_INDEX
from tests.support.apps import Echo

CRASHING_WORKER = "TEST_CRASHING_WORKER"

if os.environ.get(WORKER_INDEX) is not None and os.environ.get(WORKER_INDEX) == os.environ.get(CRASHING_WORKER):
    os.kill(os.getpid(), signal.SIGKILL)

__all__ = ["Echo"]
