"""Key-value stores with a TTL: expiry by stream time, a put's own TTL, reads of expired entries, the
changelog's tombstones, and a store restored from its changelog holding the same live keys.

The app is Quix Streams' State TTL cookbook example "Emit only on toggle or after TTL expiry" (its
table of four cases is the first test), by stream time where Quix goes by the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime.config import parse_app
from runtime.config.common import ConfigError
from runtime.testkit import AppDriver
from stores import BufferedKeyValueStore, MemoryBackend, StoreError, TtlView
from stores.serdes import RawSerde, resolve_serde

MakeDriver = Callable[..., AppDriver]
TTL = 300_000  # five minutes, as in the cookbook
T0 = 1_790_000_000_000
CHANGELOG = "ttl-last-event-changelog"


def toggle_app(guarantee: str = "exactly_once", **store: Any) -> dict[str, Any]:
    return {
        "app_id": "ttl",
        "topics": {
            "readings": {"partitions": 1, "key_serde": "str", "value_serde": "json"},
            "changes": {"partitions": 1, "key_serde": "str", "value_serde": "json"},
        },
        "processors": [
            {"name": "toggle", "class": "tests.support.ttl_apps:EmitOnToggleOrExpiry", "inputs": ["readings"],
             "outputs": ["changes"], "params": {"output": "changes"},
             "stores": {"last-event": {"key_serde": "str", "ttl_ms": TTL, **store}}}
        ],
        "guarantee": guarantee,
    }  # fmt: skip


def sent(driver: AppDriver) -> list[tuple[str, str]]:
    return [(record.key, record.value["event"]) for record in driver.read("changes")]


def live_entries(driver: AppDriver) -> set[bytes]:
    """The store's keys as its changelog leaves them: each key's last record, tombstones removed."""
    last: dict[bytes, bytes | None] = {}
    for record in driver.topics.records(CHANGELOG):
        last[record.key] = record.value
    return {key for key, value in last.items() if value is not None and key.startswith(b"\x04")}


def test_the_cookbook_table_a_reading_goes_on_when_it_toggles_or_the_last_one_expired(app_driver: MakeDriver) -> None:
    driver = app_driver(toggle_app())
    driver.pipe("readings", {"event": "ON"}, key="window", timestamp=T0)  # nothing cached: emit
    driver.pipe("readings", {"event": "ON"}, key="window", timestamp=T0 + 60_000)  # the same: drop
    driver.pipe("readings", {"event": "OFF"}, key="window", timestamp=T0 + 120_000)  # toggled: emit
    driver.pipe("readings", {"event": "OFF"}, key="window", timestamp=T0 + 120_000 + TTL - 1)  # still cached: drop
    driver.pipe("readings", {"event": "OFF"}, key="window", timestamp=T0 + 120_000 + TTL)  # expired: emit
    assert sent(driver) == [("window", "ON"), ("window", "OFF"), ("window", "OFF")]


def test_an_entry_expires_by_stream_time_not_by_the_wall_clock(app_driver: MakeDriver) -> None:
    driver = app_driver(toggle_app(), wall_clock_ms=T0)
    driver.pipe("readings", {"event": "ON"}, key="door", timestamp=T0)
    driver.advance_wall_clock(10 * TTL)
    assert driver.store("last-event").get("door") == "ON"
    driver.advance_stream_time(T0 + TTL)
    assert driver.store("last-event").get("door") is None


def test_a_puts_own_ttl_overrides_the_stores(app_driver: MakeDriver) -> None:
    driver = app_driver(toggle_app())
    driver.pipe("readings", {"event": "ON", "ttl_ms": 1_000}, key="short", timestamp=T0)
    driver.pipe("readings", {"event": "ON", "ttl_ms": 10 * TTL}, key="long", timestamp=T0)
    driver.pipe("readings", {"event": "ON"}, key="default", timestamp=T0)
    store = driver.store("last-event")
    driver.advance_stream_time(T0 + 1_000)
    assert (store.get("short"), store.get("default"), store.get("long")) == (None, "ON", "ON")
    driver.advance_stream_time(T0 + TTL)
    assert (store.get("default"), store.get("long")) == (None, "ON")
    assert [key for key, _ in store.range()] == ["long"]
    driver.advance_stream_time(T0 + 10 * TTL)
    assert list(store.range()) == []


def test_an_expired_entry_is_never_read_before_it_is_deleted_and_its_tombstone_comes_with_the_commit(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(toggle_app(), auto_commit=False)
    driver.pipe_all("readings", [("a", {"event": "ON"}, T0), ("b", {"event": "ON", "ttl_ms": 10 * TTL}, T0)])
    driver.commit()
    assert live_entries(driver) == {b"\x04a", b"\x04b"}
    driver.pipe("readings", {"event": "ON"}, key="c", timestamp=T0 + TTL)  # moves stream time past a's expiry
    store = driver.store("last-event")
    assert store.get("a") is None and [key for key, _ in store.range()] == ["b", "c"]
    assert [key for key, _ in store.prefix("a")] == []
    assert live_entries(driver) == {b"\x04a", b"\x04b"}, "nothing is logged before the commit"
    driver.commit()
    assert live_entries(driver) == {b"\x04b", b"\x04c"}, "a's tombstone is in the commit that expired it"
    assert sent(driver) == [("a", "ON"), ("b", "ON"), ("c", "ON")]


def test_a_key_put_at_each_record_costs_one_entry_and_one_index_record_a_commit(app_driver: MakeDriver) -> None:
    driver = app_driver(toggle_app(), auto_commit=False)
    for n in range(20):  # each toggles, so each is put, each with a later expiry
        driver.pipe("readings", {"event": "ON" if n % 2 else "OFF"}, key="hot", timestamp=T0 + n)
    driver.commit()
    logged = driver.topics.records(CHANGELOG)
    assert sorted(record.key[:1] for record in logged) == [b"\x00", b"\x04", b"\x05"]  # time, entry, index


def test_a_store_restored_from_the_changelog_has_the_same_live_keys_and_hides_the_same_expired_ones(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(toggle_app())
    driver.pipe_all(
        "readings",
        [
            ("a", {"event": "ON"}, T0),
            ("b", {"event": "ON", "ttl_ms": 10 * TTL}, T0),
            ("c", {"event": "ON", "ttl_ms": TTL - 1}, T0 + 1),
            ("d", {"event": "ON"}, T0 + TTL),  # expires a and c
        ],
    )
    original = driver.store("last-event")
    assert isinstance(original, TtlView)
    raw = [(record.key, record.value) for record in driver.topics.records(CHANGELOG)]
    restored_bytes = BufferedKeyValueStore(MemoryBackend(), RawSerde(), RawSerde(), name="last-event")
    restored_bytes.restore(raw, len(raw))
    restored = TtlView(restored_bytes, TTL, resolve_serde("str"), resolve_serde("msgpack"))  # no record seen yet
    restored.check_layout()
    assert restored.stream_time == original.stream_time == T0 + TTL
    assert list(restored.range()) == list(original.range()) == [("b", "ON"), ("d", "ON")]
    assert restored.get("c") is None and original.get("c") is None


def test_a_plain_put_with_a_ttl_and_a_ttl_store_over_plain_keys_are_refused(app_driver: MakeDriver) -> None:
    driver = app_driver(toggle_app(ttl_ms=None))
    with pytest.raises(TypeError, match="store 'last-event' has no ttl_ms in the app YAML"):
        driver.store("last-event").put("k", "v", ttl_ms=5)
    with pytest.raises(ValueError, match="ttl_ms must be a positive int"):
        app_driver(toggle_app()).store("last-event").put("k", "v", ttl_ms=0)
    plain = BufferedKeyValueStore(MemoryBackend(), name="s")
    plain.put("k", "v")
    plain.flush()
    with pytest.raises(StoreError, match="laid out for another kind than key_value with ttl_ms"):
        TtlView(BufferedKeyValueStore(plain._backend, RawSerde(), RawSerde(), name="s"), TTL).check_layout()


def test_ttl_ms_is_a_duration_of_key_value_stores_only() -> None:
    config = parse_app(toggle_app(ttl_ms="5m"))
    assert config.processors[0].stores["last-event"].ttl_ms == 300_000
    with pytest.raises(
        ConfigError, match=r"stores\.last-event\.ttl_ms: a window store expires its entries by retention_ms"
    ):
        parse_app(toggle_app(kind="window", retention_ms=1000))
    with pytest.raises(ConfigError, match=r"stores\.last-event\.ttl_ms: .*greater than 0"):
        parse_app(toggle_app(ttl_ms=0))
    with pytest.raises(ConfigError, match="snapshots are built of key-value stores without ttl_ms"):
        parse_app(toggle_app(snapshots={"location": "/tmp/snapshots"}))
