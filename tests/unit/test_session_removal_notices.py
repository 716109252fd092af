"""Session windows emitting updates, on the test kit's driver: a session merged into another after an update
of it was sent is announced removed, before the merged session's update, as Kafka Streams forwards a
tombstone for each replaced session. The scenarios are those of Kafka Streams'
`KStreamSessionWindowAggregateProcessorTest`: a commit after each record here is its store without a
cache (`shouldImmediatelyForwardRemovedSessionsWhenMerging`, `shouldMergeSessions`), one commit after all
of them its cached store (`shouldHandleMultipleSessionsAndMerging`). Those ran with the default grace of
24 hours of their time; a grace of one gap keeps their records on time here. The reader docs/windows.md
shows counts each user's clicks once from the updates."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testkit import AppDriver
from tests.unit.test_windows_doc_example import documented

MakeDriver = Callable[..., AppDriver]
T = 1_790_000_000_000
GAP = 5 * 60 * 1000
Update = tuple[str, int, int, Any, int]  # key, start, end, count (None: removed), timestamp; times from T

APP: dict[str, Any] = {
    "app_id": "sessions",
    "topics": {
        "clicks": {"partitions": 1, "key_serde": "str", "value_serde": "json"},
        "sessions": {"partitions": 1, "key_serde": "str", "value_serde": "json"},
    },
    "processors": [{"name": "per-session", "class": "processors.windows:Aggregate", "inputs": ["clicks"],
                    "outputs": ["sessions"], "params": {"window": {"type": "session", "gap_ms": GAP, "grace_ms": GAP},
                                                        "aggregation": {"type": "count"}, "emit": "updates",
                                                        "output": "sessions"}}],
}  # fmt: skip


def updates(driver: AppDriver) -> list[Update]:
    out = []
    for record in driver.read("sessions"):
        value = record.value
        assert value.get("removed", False) is (value["value"] is None), value
        out.append((record.key, value["start"] - T, value["end"] - T, value["value"], record.timestamp - T))
    return out


def click(driver: AppDriver, user: str, at: int) -> None:
    driver.pipe("clicks", {"page": "/"}, key=user, timestamp=T + at)


def test_a_session_sent_then_merged_is_announced_removed_before_the_merged_session(app_driver: MakeDriver) -> None:
    """shouldImmediatelyForwardRemovedSessionsWhenMerging: the notice is the replaced session's window with
    a null value, stamped as its updates were (its end)."""
    driver = app_driver(APP)
    click(driver, "a", 0)
    assert updates(driver) == [("a", 0, 0, 1, 0)]
    click(driver, "a", 5)
    assert updates(driver) == [("a", 0, 0, None, 0), ("a", 0, 5, 2, 5)]


def test_a_record_between_two_sent_sessions_removes_both(app_driver: MakeDriver) -> None:
    """shouldMergeSessions: a record within the gap of two sessions merges them, and both were sent."""
    driver = app_driver(APP)
    click(driver, "mel", 0)
    click(driver, "mel", GAP + 1)  # beyond the gap: a second session
    assert updates(driver) == [("mel", 0, 0, 1, 0), ("mel", GAP + 1, GAP + 1, 1, GAP + 1)]
    click(driver, "mel", GAP // 2)
    assert updates(driver) == [
        ("mel", 0, 0, None, 0),
        ("mel", GAP + 1, GAP + 1, None, GAP + 1),
        ("mel", 0, GAP + 1, 3, GAP + 1),
    ]


def test_the_doc_example_sends_two_notices_then_the_merged_session(app_driver: MakeDriver) -> None:
    driver = app_driver(APP)
    minute = 60_000
    click(driver, "u", 0)
    click(driver, "u", 10 * minute)
    assert [update[3] for update in updates(driver)] == [1, 1]
    click(driver, "u", 5 * minute)
    assert updates(driver) == [
        ("u", 0, 0, None, 0),
        ("u", 10 * minute, 10 * minute, None, 10 * minute),
        ("u", 0, 10 * minute, 3, 10 * minute),
    ]


def test_a_session_sent_before_a_restart_is_announced_removed_after_it(tmp_path: Path) -> None:
    """The store says which sessions were sent: each that the last commit left in it."""
    with AppDriver(APP, state_dir=tmp_path) as driver:
        click(driver, "a", 0)
        assert updates(driver) == [("a", 0, 0, 1, 0)]
    with AppDriver(APP, state_dir=tmp_path) as driver:
        click(driver, "a", 5)
        assert updates(driver) == [("a", 0, 0, None, 0), ("a", 0, 5, 2, 5)]


def test_sessions_created_and_merged_between_two_commits_need_no_notice(app_driver: MakeDriver) -> None:
    """shouldHandleMultipleSessionsAndMerging: one commit after every record, so no session merged away had
    been sent; the updates are Kafka Streams' (in the order each session last changed)."""
    driver = app_driver(APP)
    half = GAP // 2
    clicks = [("a", 0), ("b", 0), ("c", 0), ("d", 0), ("d", half), ("a", GAP + 1), ("b", GAP + 1),
              ("a", GAP + 1 + half), ("c", GAP + 1 + half)]  # fmt: skip
    driver.pipe_all("clicks", [(user, {"page": "/"}, T + at) for user, at in clicks])
    assert sorted(updates(driver)) == sorted([
        ("a", 0, 0, 1, 0),
        ("b", 0, 0, 1, 0),
        ("c", 0, 0, 1, 0),
        ("d", 0, half, 2, half),
        ("b", GAP + 1, GAP + 1, 1, GAP + 1),
        ("a", GAP + 1, GAP + 1 + half, 2, GAP + 1 + half),
        ("c", GAP + 1 + half, GAP + 1 + half, 1, GAP + 1 + half),
    ])  # fmt: skip


def test_final_results_never_announce_a_removal(app_driver: MakeDriver) -> None:
    app = copy.deepcopy(APP)
    del app["processors"][0]["params"]["emit"]
    driver = app_driver(app)
    for at in (0, GAP + 1, GAP // 2, 3 * GAP + 2):  # the third merges the first two; the last closes them
        click(driver, "mel", at)
    assert updates(driver) == [("mel", 0, GAP + 1, 3, GAP + 1)]


@pytest.mark.parametrize("notices", [True, False])
def test_the_documented_reader_counts_each_click_once_thanks_to_the_notices(
    app_driver: MakeDriver, notices: bool
) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(documented("Emit modes", "python"), "docs/windows.md", "exec"), namespace)
    reader = namespace["ClicksPerUser"]()
    driver = app_driver(APP)
    clicks = [("u", 0), ("v", 10), ("u", 2 * GAP), ("u", GAP), ("u", 2 * GAP + 7), ("v", 5 * GAP), ("v", 3 * GAP)]
    for user, at in clicks:
        click(driver, user, at)
        for record in driver.read("sessions"):
            if notices or not record.value.get("removed"):
                reader.apply(record.key, record.value)
    assert driver.count("per-session", "late_records") == 0
    counted = {user: reader.total(user) for user in ("u", "v")}
    if notices:
        assert counted == {"u": 4, "v": 3}
    else:  # u's sessions at 0 and 2 GAP, sent, merged by the click at GAP into one sent, grown by the last
        assert counted == {"u": 1 + 1 + 3 + 4, "v": 3}
