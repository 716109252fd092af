"""The session timeout against the broker's bounds, as read from its configuration."""

from __future__ import annotations

import pytest

from runtime.config import ConfigError
from runtime.kafka.session_bounds import check_session_timeout

BROKER = {"group.min.session.timeout.ms": "6000", "group.max.session.timeout.ms": "1800000"}


@pytest.mark.parametrize("asked", [6000, 45_000, 1_800_000])
def test_a_timeout_within_the_bounds_passes(asked: int) -> None:
    check_session_timeout(asked, BROKER)


@pytest.mark.parametrize("asked", [10, 5999, 1_800_001])
def test_a_timeout_outside_the_bounds_names_the_field_and_the_bounds(asked: int) -> None:
    with pytest.raises(
        ConfigError, match=f"^kafka.consumer.session_timeout_ms: the broker takes 6000 to 1800000 ms .*, not {asked}$"
    ):
        check_session_timeout(asked, BROKER)


def test_bounds_the_broker_did_not_give_leave_the_check_to_the_join() -> None:
    check_session_timeout(10, {})
