"""The cache outside the repository where what is fetched or built on first use is kept: jars, binaries,
the local servers' data. `RUNTIME_CACHE_DIR` moves it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    configured = os.environ.get("RUNTIME_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "kafka-actor-runtime"
