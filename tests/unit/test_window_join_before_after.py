"""A stream-stream join whose window reaches further one way than the other (`before_ms`, `after_ms`), on the
test kit's driver: the scenarios of Kafka Streams' `KStreamKStreamJoinTest.testAsymmetricWindowingAfter`
and `testAsymmetricWindowingBefore` (`JoinWindows.of(0).after(100)`, `.before(100)`), step by step, for
the inner, left and outer joins; each side's window closing at its own end; a left join sending a record
alone only once stream time passed t + before + after + grace; and the params' checks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.config import ConfigError, parse_app
from runtime.testkit import AppDriver
from tests.support.config_cli import GUARD_MARKER, UNREACHABLE, install_network_guard, run_cli, write_yaml

MakeDriver = Callable[..., AppDriver]
T = 1_790_000_000_000
KEYS = ["0", "1", "2", "3"]
Joined = tuple[str, str | None, str | None, int]  # key, left value, right value, timestamp - T


class Step:
    """Four records of one side, one per key (key i gets `times[i]`, value letter + i), and the pairs they
    make, written as Kafka Streams' test writes them: `0:A0+b0@1000`."""

    def __init__(self, side: str, letter: str, times: list[int], joined: str = "") -> None:
        self.side, self.letter, self.times = side, letter, times
        self.joined = [_pair(text) for text in joined.split()]


def _pair(text: str) -> Joined:
    key, rest = text.split(":")
    values, at = rest.split("@")
    left, right = values.split("+")
    return key, left, right, int(at)


def each(at: int) -> list[int]:
    return [at] * len(KEYS)


# JoinWindows.of(0).after(100): a left record at t joins right records from t to t + 100.
AFTER = [
    Step("L", "A", [1000, 1001, 1002, 1003]),
    Step("R", "a", each(999)),  # before every left record
    Step("R", "b", each(1000), "0:A0+b0@1000"),
    Step("R", "c", each(1001), "0:A0+c0@1001 1:A1+c1@1001"),
    Step("R", "d", each(1002), "0:A0+d0@1002 1:A1+d1@1002 2:A2+d2@1002"),
    Step("R", "e", each(1003), "0:A0+e0@1003 1:A1+e1@1003 2:A2+e2@1003 3:A3+e3@1003"),
    Step("R", "f", each(1100), "0:A0+f0@1100 1:A1+f1@1100 2:A2+f2@1100 3:A3+f3@1100"),
    Step("R", "g", each(1101), "1:A1+g1@1101 2:A2+g2@1101 3:A3+g3@1101"),
    Step("R", "h", each(1102), "2:A2+h2@1102 3:A3+h3@1102"),
    Step("R", "i", each(1103), "3:A3+i3@1103"),
    Step("R", "j", each(1104)),  # more than 100 after every left record
]

# JoinWindows.of(0).before(100): a left record at t joins right records from t - 100 to t.
BEFORE = [
    Step("L", "A", [1000, 1001, 1002, 1003]),
    Step("R", "a", each(899)),  # more than 100 before every left record
    Step("R", "b", each(900), "0:A0+b0@1000"),
    Step("R", "c", each(901), "0:A0+c0@1000 1:A1+c1@1001"),
    Step("R", "d", each(902), "0:A0+d0@1000 1:A1+d1@1001 2:A2+d2@1002"),
    Step("R", "e", each(903), "0:A0+e0@1000 1:A1+e1@1001 2:A2+e2@1002 3:A3+e3@1003"),
    Step("R", "f", each(1000), "0:A0+f0@1000 1:A1+f1@1001 2:A2+f2@1002 3:A3+f3@1003"),
    Step("R", "g", each(1001), "1:A1+g1@1001 2:A2+g2@1002 3:A3+g3@1003"),
    Step("R", "h", each(1002), "2:A2+h2@1002 3:A3+h3@1003"),
    Step("R", "i", each(1003), "3:A3+i3@1003"),
    Step("R", "j", each(1004)),  # after every left record
]


def join_app(join: str, window: dict[str, int], grace: int) -> dict[str, Any]:
    topic = {"partitions": 1, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": "join",
        "topics": {"L": topic, "R": topic, "out": topic},
        "processors": [{"name": "join", "class": "processors.joins:WindowJoin", "inputs": ["L", "R"],
                        "outputs": ["out"], "params": {"left": "L", "right": "R", **window, "grace_ms": grace,
                                                       "join": join, "output": "out"}}],
    }  # fmt: skip


def taken(driver: AppDriver) -> list[Joined]:
    return [(r.key, r.value["left"], r.value["right"], r.timestamp - T) for r in driver.read("out")]


@pytest.mark.parametrize("join", ["inner", "left", "outer"])
@pytest.mark.parametrize(
    ("window", "steps"),
    [({"time_difference_ms": 0, "after_ms": 100}, AFTER), ({"time_difference_ms": 0, "before_ms": 100}, BEFORE)],
    ids=["after", "before"],
)
def test_kafka_streams_asymmetric_windowing_scenario(
    app_driver: MakeDriver, join: str, window: dict[str, int], steps: list[Step]
) -> None:
    """Kafka Streams' scenario ran with its default grace of 24 hours; 10 ms keeps the right records that
    come behind stream time on time here (the earliest, `a`, ends its window 4 ms behind it), and sends
    nothing alone before the end, where a record far ahead closes every window."""
    driver = app_driver(join_app(join, window, grace=10))
    for step in steps:
        records = [(key, f"{step.letter}{key}", T + at) for key, at in zip(KEYS, step.times, strict=True)]
        driver.pipe_all(step.side, records)
        assert taken(driver) == step.joined, f"after {step.letter}"
    assert driver.count("join", "late_records") == 0
    driver.pipe("L", "Z", key="z", timestamp=T + 5000)
    joined_rights = {right for step in steps for _, _, right, _ in step.joined}
    unmatched_rights = [
        (key, None, f"{step.letter}{key}", at)
        for step in steps
        if step.side == "R"
        for key, at in zip(KEYS, step.times, strict=True)
        if f"{step.letter}{key}" not in joined_rights
    ]
    alone = {"inner": [], "left": [], "outer": unmatched_rights}[join]  # every left record met one
    assert sorted(taken(driver), key=lambda pair: pair[3]) == sorted(alone, key=lambda pair: pair[3])


def pipe(driver: AppDriver, records: str) -> None:
    """`records`: `side key value@ms, ...`, piped one at a time, so taken in this order."""
    for record in records.split(", "):
        side, key, value_at = record.split()
        value, at = value_at.split("@")
        driver.pipe(side, value, key=key, timestamp=T + int(at))


def test_each_sides_window_closes_at_its_own_end(app_driver: MakeDriver) -> None:
    """before 20, after 5: a left record's window ends 5 after it, a right record's 20 after it."""
    driver = app_driver(join_app("inner", {"before_ms": 20, "after_ms": 5}, grace=0))
    pipe(driver, "L k A@10, R z Y@30, R k a@10")  # a: 10 + 20 is not before 30; its window [5, 30] holds A
    assert taken(driver) == [("k", "A", "a", 10)]
    pipe(driver, "L k B@24")  # B: 24 + 5 is before 30, late, though a (10) was in its window [4, 29]
    assert taken(driver) == []
    assert driver.count("join", "late_records") == 1


def test_a_left_record_is_sent_alone_once_stream_time_passes_it_plus_before_after_and_grace(
    app_driver: MakeDriver,
) -> None:
    """before 20, after 5, grace 2: a right record at 5 meets a left record at 0, and is on time until
    stream time 5 + 20 + 2 = 27; so the left record waits for it until then, and not longer."""
    driver = app_driver(join_app("left", {"before_ms": 20, "after_ms": 5}, grace=2))
    pipe(driver, "L k A@0, L z Z@27, R k a@5")
    assert taken(driver) == [("k", "A", "a", 5)]
    driver = app_driver(join_app("left", {"before_ms": 20, "after_ms": 5}, grace=2))
    pipe(driver, "L k A@0, L z Z@28")
    assert taken(driver) == [("k", "A", None, 0)]
    pipe(driver, "R k a@5")
    assert taken(driver) == [] and driver.count("join", "late_records") == 1


VALID = join_app("left", {"time_difference_ms": 10}, grace=0) | {"kafka": {"bootstrap_servers": UNREACHABLE}}
AT = "processors[0].params."


@pytest.mark.parametrize(
    ("window", "error"),
    [
        ({"before_ms": 10}, "after_ms: after_ms is needed, or time_difference_ms, which sets before_ms and after_ms"),
        ({"after_ms": 10}, "before_ms: before_ms is needed, or time_difference_ms, which sets before_ms and after_ms"),
        ({"time_difference_ms": 10, "before_ms": -1}, "before_ms: Input should be greater than or equal to 0"),
        ({"before_ms": 5, "after_ms": -5}, "after_ms: Input should be greater than or equal to 0"),
        ({"time_difference_ms": -10}, "time_difference_ms: Input should be greater than or equal to 0"),
    ],
)
def test_a_window_without_both_reaches_or_with_a_negative_one_names_the_field(
    window: dict[str, int], error: str
) -> None:
    app = copy.deepcopy(VALID)
    params = app["processors"][0]["params"]
    del params["time_difference_ms"]
    params.update(window)
    with pytest.raises(ConfigError) as raised:
        parse_app(app)
    assert str(raised.value).splitlines() == [AT + error]


def test_the_command_exits_2_on_a_negative_before_ms_before_it_connects(tmp_path: Path) -> None:
    app = copy.deepcopy(VALID)
    app["processors"][0]["params"]["before_ms"] = -1
    path = write_yaml(tmp_path / "app.yaml", app)
    result = run_cli(path, install_network_guard(tmp_path / "guard"))
    assert GUARD_MARKER not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert f"{AT}before_ms: Input should be greater than or equal to 0" in result.stderr, result.stderr
