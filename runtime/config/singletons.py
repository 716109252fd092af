"""The `singletons:` section of the app YAML: how the one process that runs the app's outboxes and table
followers is elected among all of the app's processes."""

from __future__ import annotations

from pydantic import Field

from runtime.config.common import Strict
from runtime.config.kafka_options import INT32_MAX


class SingletonsConfig(Strict):
    """Each outbox and table follower is run by the process that owns its election group's one partition;
    when that process dies, another takes over once its session has timed out. The broker bounds the
    session by `group.min.session.timeout.ms` (6000 by default) and `group.max.session.timeout.ms`."""

    session_timeout_ms: int = Field(default=6_000, ge=1000, le=INT32_MAX)
