"""The stream-table join on a table with history, on the test kit: a stream record joins the version of the
table valid at its own timestamp, also when the table's updates were taken before it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from runtime.testkit import AppDriver

HOUR = 3_600_000

APP: dict[str, Any] = {
    "app_id": "prices",
    "topics": {
        "trades": {"partitions": 1, "key_serde": "str", "value_serde": "json"},
        "prices": {"partitions": 1, "key_serde": "str", "value_serde": "json", "cleanup_policy": "compact"},
        "priced": {"partitions": 1, "key_serde": "str", "value_serde": "json"},
    },
    "processors": [{
        "name": "price",
        "class": "processors.joins:TableJoin",
        "inputs": ["trades"],
        "tables": {"prices": {"topic": "prices", "history_ms": 24 * HOUR}},
        "outputs": ["priced"],
        "params": {"table": "prices", "output": "priced", "join": "left"},
    }],
}  # fmt: skip


def without_history() -> dict[str, Any]:
    app = copy.deepcopy(APP)
    del app["processors"][0]["tables"]["prices"]["history_ms"]
    return app


def joined(driver: AppDriver) -> list[tuple[int, Any]]:
    return [(record.timestamp, record.value["table"]) for record in driver.read("priced")]


def test_a_trade_joins_the_price_at_its_time_though_later_prices_were_read_first() -> None:
    """The example of Kafka Streams' tutorial on versioned KTables ("temporal join accuracy"): a stock's
    price is a table, its trades a stream, and a trade must join the price at the trade's time, not the
    latest one; with a versioned table (KIP-889) the stream-table join looks the price up as of the
    trade's timestamp (KIP-914). Here every price is read before the trades (the stream lags), as the
    tutorial produces them."""
    with AppDriver(APP) as driver:
        driver.pipe_all("prices", [("ACME", {"usd": 10}, 1 * HOUR), ("ACME", {"usd": 12}, 3 * HOUR),
                                   ("ACME", None, 5 * HOUR), ("ACME", {"usd": 9}, 6 * HOUR)])  # fmt: skip
        driver.pipe_all("trades", [("ACME", {"qty": n}, t * HOUR) for n, t in enumerate([0, 1, 2, 4, 5, 7])])
        assert joined(driver) == [
            (0, None), (1 * HOUR, {"usd": 10}), (2 * HOUR, {"usd": 10}), (4 * HOUR, {"usd": 12}),
            (5 * HOUR, None), (7 * HOUR, {"usd": 9}),
        ]  # fmt: skip
        table = driver.table("prices")
        assert table.get("ACME") == {"usd": 9} and table.get_as_of("ACME", 3 * HOUR) == {"usd": 12}
    with AppDriver(without_history()) as driver:
        driver.pipe_all("prices", [("ACME", {"usd": 10}, 1 * HOUR), ("ACME", {"usd": 12}, 3 * HOUR)])
        driver.pipe("trades", {"qty": 1}, "ACME", timestamp=2 * HOUR)
        assert joined(driver) == [(2 * HOUR, {"usd": 12})], "a plain table has only the latest price"


def test_a_late_price_update_takes_its_place_and_leaves_the_latest() -> None:
    with AppDriver(APP) as driver:
        driver.pipe_all("prices", [("ACME", {"usd": 10}, 1 * HOUR), ("ACME", {"usd": 12}, 3 * HOUR),
                                   ("ACME", {"usd": 11}, 2 * HOUR)])  # fmt: skip
        driver.pipe_all("trades", [("ACME", {"qty": 1}, 90 * 60_000), ("ACME", {"qty": 2}, 150 * 60_000),
                                   ("ACME", {"qty": 3}, 4 * HOUR)])  # fmt: skip
        assert [value for _, value in joined(driver)] == [{"usd": 10}, {"usd": 11}, {"usd": 12}]


def test_a_trade_older_than_the_history_finds_no_price_unless_the_latest_was_valid_then() -> None:
    with AppDriver(APP) as driver:
        driver.pipe_all("prices", [("OLD", {"usd": 1}, 0), ("ACME", {"usd": 10}, 1 * HOUR),
                                   ("ACME", {"usd": 12}, 30 * HOUR), ("LATE", {"usd": 5}, 5 * HOUR)])  # fmt: skip
        driver.pipe_all("trades", [("ACME", {"qty": 1}, 2 * HOUR), ("OLD", {"qty": 1}, 2 * HOUR),
                                   ("LATE", {"qty": 1}, 31 * HOUR)])  # fmt: skip
        # The cutoff is 30 h - 24 h: the price of 1 h is gone, and one of 5 h came too late to be kept.
        assert [value for _, value in joined(driver)] == [None, {"usd": 1}, None]


def test_a_plain_table_refuses_reads_as_of_a_time_naming_the_setting() -> None:
    with AppDriver(without_history()) as driver, pytest.raises(TypeError, match="give it history_ms"):
        driver.table("prices").get_as_of("ACME", 0)
