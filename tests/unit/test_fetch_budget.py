"""The group consumer's fetches: a share of one budget a partition, so that a worker of many partitions does not
hold a megabyte of fetched records for each."""

from __future__ import annotations

import copy

from runtime.config import parse_app
from runtime.kafka.connection import Clients, fetch_bytes_per_partition
from tests.unit.test_config_cli import VALID


def test_the_group_consumers_fetch_size_is_a_share_of_a_budget_unless_the_yaml_sets_it() -> None:
    assert [fetch_bytes_per_partition(count) for count in (1, 6, 16, 96, 1000)] == [
        1024 * 1024,
        1024 * 1024,
        1024 * 1024,
        174_762,
        64 * 1024,
    ]
    assert Clients(parse_app(VALID), "x:9").group_consumer_options(96)["max_partition_fetch_bytes"] == 174_762
    app = copy.deepcopy(VALID)
    app["kafka"] = {"consumer": {"max_partition_fetch_bytes": 2_000_000}}
    assert Clients(parse_app(app), "x:9").group_consumer_options(96)["max_partition_fetch_bytes"] == 2_000_000
