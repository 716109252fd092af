"""The session timeout the broker lets a group member ask for, checked before the worker joins.

The broker refuses a join whose session timeout lies outside its `group.min.session.timeout.ms` and
`group.max.session.timeout.ms`, and aiokafka reports that as a bare `InvalidSessionTimeoutError` from
deep inside the consumer. The bounds can be read at start, so a timeout outside them is a mistake in
the YAML and is reported as one, naming the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from runtime.config import AppConfig, ConfigError
from stores.broker_configs import BrokerConfigsRefused, broker_configs

log = logging.getLogger(__name__)

AIOKAFKA_SESSION_TIMEOUT_MS = 10_000
BOUNDS = ("group.min.session.timeout.ms", "group.max.session.timeout.ms")


def session_timeout_ms(config: AppConfig) -> int:
    options = {**config.kafka.client, **config.kafka.consumer}
    return int(options.get("session_timeout_ms", AIOKAFKA_SESSION_TIMEOUT_MS))


def check_session_timeout(asked_ms: int, broker_configs: Mapping[str, str | None]) -> None:
    """A ConfigError when `asked_ms` lies outside the bounds in `broker_configs`; without them, the join checks."""
    lowest, highest = (broker_configs.get(name) for name in BOUNDS)
    if lowest is None or highest is None:
        return
    if not int(lowest) <= asked_ms <= int(highest):
        raise ConfigError(
            f"kafka.consumer.session_timeout_ms: the broker takes {lowest} to {highest} ms "
            f"(its {BOUNDS[0]} and {BOUNDS[1]}), not {asked_ms}"
        )


async def require_session_timeout_allowed(admin: AIOKafkaAdminClient, config: AppConfig) -> None:
    """Check the app's session timeout against the broker's bounds; when they cannot be read (no
    DescribeConfigs permission), the join itself is the check."""
    try:
        bounds = await broker_configs(admin, BOUNDS)
    except (KafkaError, BrokerConfigsRefused, IndexError, KeyError) as error:
        log.debug("the broker's session timeout bounds could not be read: %r", error)
        return
    check_session_timeout(session_timeout_ms(config), bounds)
