"""The test kit's driver: records through the runtime's own tasks, stores, policies and commits, on
in-memory topics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from runtime.errors import StopAfterCommit
from runtime.task.failures import RecordFailed
from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
NOW = 1_790_000_000_000


def app(processor: str, guarantee: str = "at_least_once", processing: str = "fail", **extra: Any) -> dict[str, Any]:
    """One processor from `in` (2 partitions) to `out`, with `params.output: out`."""
    spec: dict[str, Any] = {"name": "p", "class": processor, "inputs": ["in"], "outputs": ["out"],
                            "params": {"output": "out", **extra.pop("params", {})}, **extra}  # fmt: skip
    return {
        "app_id": "kit",
        "topics": {
            "in": {"partitions": 2, "key_serde": "str", "value_serde": "json"},
            "out": {"partitions": 2, "key_serde": "str", "value_serde": "json"},
        },
        "processors": [spec],
        "guarantee": guarantee,
        "errors": {"deserialization": processing, "processing": processing},
    }


def test_records_go_through_serdes_both_ways_to_the_partition_kafka_would_choose(app_driver: MakeDriver) -> None:
    driver = app_driver(app("tests.support.apps:Echo"))
    driver.pipe("in", {"n": 1}, key="a", headers=[("h", b"1")], timestamp=NOW)
    driver.pipe_all("in", [("b", {"n": 2}, NOW + 1), ("a", {"n": 3})])
    out = driver.read("out")
    assert [(r.key, r.value["value"]) for r in out] == [("a", {"n": 1}), ("b", {"n": 2}), ("a", {"n": 3})]
    assert out[0].partition == driver.partition_of("out", "a") == driver.partition_of("in", "a")
    assert [r.timestamp for r in out[:2]] == [NOW, NOW + 1]  # an output keeps its input's time
    assert out[2].timestamp == driver.clock.epoch_ms()  # a record piped without one has the wall clock's
    assert driver.read("out") == []  # read once
    assert len(driver.records("out")) == 3
    assert driver.counters.processed == 3


def test_a_store_keeps_what_the_processor_wrote_and_takes_what_the_test_seeds(app_driver: MakeDriver) -> None:
    driver = app_driver(app("tests.support.driver_apps:Remember", stores={"seen": {"key_serde": "str"}}))
    partition = driver.partition_of("in", "k")
    driver.store("seen", partition).put("k", {"seeded": True})
    driver.pipe("in", {"n": 1}, key="k")
    assert driver.read("out")[0].value == {"before": {"seeded": True}, "now": {"n": 1}}
    assert driver.store("seen", partition).get("k") == {"n": 1}
    (change,) = driver.records("kit-seen-changelog")  # a key's last value at the commit: the seed is gone
    assert (change.partition, change.key, msgpack.unpackb(change.value)) == (partition, b"k", {"n": 1})
    with pytest.raises(KeyError, match="no processor declares a store 'nope'"):
        driver.store("nope")


def test_wall_clock_punctuations_run_when_the_test_moves_the_clock(app_driver: MakeDriver) -> None:
    driver = app_driver(app("tests.support.driver_apps:Ticker", params={"every_ms": 1000, "stream_every_ms": 60_000}),
                        wall_clock_ms=NOW)  # fmt: skip
    driver.advance_wall_clock(999)
    assert driver.read("out") == []
    driver.advance_wall_clock(1)
    ticks = driver.read("out")
    assert [r.value for r in ticks] == [{"tick": 1}, {"tick": 1}]  # one per task (partition)
    assert {r.timestamp for r in ticks} == {NOW + 1000}  # stamped with the time it fired for
    driver.advance_wall_clock(5000)  # late: it runs once, not five times
    assert [r.value for r in driver.read("out")] == [{"tick": 2}, {"tick": 2}]


def test_stream_time_punctuations_run_after_the_record_that_brings_them_or_when_the_test_moves_it(
    app_driver: MakeDriver,
) -> None:
    driver = app_driver(app("tests.support.driver_apps:Ticker", params={"every_ms": 10**9, "stream_every_ms": 60_000}))
    driver.pipe("in", {"n": 1}, key="a", timestamp=120_000 - 1)  # due first after the task's first record
    driver.pipe("in", {"n": 2}, key="a", timestamp=120_000)  # then at each multiple
    driver.pipe("in", {"n": 3}, key="a", timestamp=130_000)
    expected = [{"n": 1}, {"stream_time": 119_999}, {"n": 2}, {"stream_time": 120_000}, {"n": 3}]
    assert [r.value for r in driver.read("out")] == expected
    driver.advance_stream_time(300_000, "p")  # both tasks: the one without records was due since it started
    assert [r.value for r in driver.read("out")] == [{"stream_time": 300_000}] * 2
    driver.advance_stream_time(299_000)  # stream time never goes back
    assert driver.read("out") == []


def test_a_stream_time_punctuation_runs_right_after_the_record_that_brings_it_within_one_batch(
    app_driver: MakeDriver,
) -> None:
    config = app("tests.support.driver_apps:Ticker", params={"every_ms": 10**9, "stream_every_ms": 60_000})
    for topic in config["topics"].values():
        topic["partitions"] = 1  # one task, and its outputs in the order it sent them
    driver = app_driver(config)
    driver.pipe_all("in", [("a", {"n": 1}, 119_999), ("a", {"n": 2}, 120_000), ("a", {"n": 3}, 130_000)])
    expected = [{"n": 1}, {"stream_time": 119_999}, {"n": 2}, {"stream_time": 120_000}, {"n": 3}]
    assert [r.value for r in driver.read("out")] == expected


def test_an_error_under_fail_is_raised_after_the_commit_of_what_came_before(app_driver: MakeDriver) -> None:
    driver = app_driver(app("tests.support.apps:Picky"))
    driver.pipe("in", {"n": 1}, key="a")
    with pytest.raises(RecordFailed, match=r"processing failed in processor 'p' for record in\[\d\]@1") as failed:
        driver.pipe("in", {"n": 2, "bad": True}, key="a")
    assert isinstance(failed.value.__cause__, ValueError)
    assert [r.value for r in driver.records("out")] == [{"n": 1}]  # nothing of the failed record escapes
    tp = next(iter(driver.committed))
    assert driver.committed[tp] == 1  # committed up to the failed record, which comes first again
    with pytest.raises(RuntimeError, match="the app stopped"):
        driver.pipe("in", {"n": 3}, key="a")


def test_dead_letters_carry_the_input_and_what_went_wrong(app_driver: MakeDriver) -> None:
    driver = app_driver(app("tests.support.apps:Picky", processing="dead_letter"))
    driver.pipe("in", {"n": 1, "bad": True}, key="a", headers=[("trace", b"t-1")])
    driver.pipe_bytes("in", b"{not json", key=b"b")
    driver.pipe("in", {"n": 2}, key="c")
    processing, undecodable = driver.dead_letters()
    assert (processing.stage, processing.error_type, processing.message, processing.processor) == (
        "processing", "builtins.ValueError", "bad record a", "p",
    )  # fmt: skip
    assert processing.value == b'{"n":1,"bad":true}' and processing.headers["trace"] == b"t-1"
    assert processing.source == ("in", driver.partition_of("in", "a"), 0)
    assert "Traceback" in processing.headers["error.stacktrace"].decode()
    assert undecodable.stage == "deserialization" and undecodable.value == b"{not json"
    assert [r.value for r in driver.read("out")] == [{"n": 2}]
    assert driver.counters.dead_lettered == 2


def test_a_value_its_topic_cannot_encode_is_a_processing_error(app_driver: MakeDriver) -> None:
    driver = app_driver(app("tests.support.driver_apps:SendsASet"))
    with pytest.raises(RecordFailed) as failed:
        driver.pipe("in", {"n": 1}, key="a")
    assert "set" in str(failed.value.__cause__)


def test_a_processor_that_cannot_start_fails_the_build(tmp_path: Path) -> None:
    with pytest.raises(StopAfterCommit, match=r"processor 'p' failed in init\(\) of task p\[0\]: RuntimeError"):
        AppDriver(app("tests.support.driver_apps:FailsToStart"), state_dir=tmp_path)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_outputs_are_visible_as_a_read_committed_consumer_sees_them(app_driver: MakeDriver, guarantee: str) -> None:
    driver = app_driver(app("tests.support.apps:Echo", guarantee), auto_commit=False)
    driver.pipe("in", {"n": 1}, key="a")
    before_commit = driver.read("out")
    driver.commit()
    after_commit = driver.read("out")
    if guarantee == "exactly_once":
        assert (before_commit, len(after_commit)) == ([], 1)  # the transaction commits with the offsets
    else:
        assert (len(before_commit), after_commit) == (1, [])
    assert driver.committed == {next(iter(driver.committed)): 1}


def test_a_driver_from_yaml_with_the_fixture(app_driver: MakeDriver, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(
        "app_id: kit\n"
        "topics: {in: {key_serde: str, value_serde: json}, out: {key_serde: str, value_serde: json}}\n"
        "processors: [{name: p, class: 'tests.support.apps:Echo', inputs: [in], outputs: [out],\n"
        "              params: {output: out}}]\n"
    )
    driver = app_driver(path)
    driver.pipe("in", {"n": 1}, key="a")
    assert driver.read("out")[0].value == {"src": [0, 0], "value": {"n": 1}}


def test_a_processor_with_concurrency_has_records_in_flight_together_and_each_keys_in_order(
    app_driver: MakeDriver,
) -> None:
    """The driver assembles tasks as a worker does, `concurrency` included: records finish out of their
    partition's order, yet each key's counts come one after another."""
    config = app("tests.support.apps:AwaitingCountPerKey", stores={"counts": {"key_serde": "str"}},
                 concurrency={"max_in_flight": 16, "order": "key"}, params={"max_wait_ms": 2})  # fmt: skip
    driver = app_driver(config)
    driver.pipe_all("in", [(f"k{n % 5}", {"n": n}, None) for n in range(200)])
    out = driver.read("out")
    counts: dict[str, list[int]] = {}
    finished: dict[int, list[int]] = {}
    for record in out:
        counts.setdefault(record.key, []).append(record.value["count"])
        finished.setdefault(record.partition, []).append(record.value["n"])
    assert counts == {f"k{k}": list(range(1, 41)) for k in range(5)}
    assert any(ns != sorted(ns) for ns in finished.values())


ELSEWHERE = r"UndeclaredOutput: processor 'p' sent to 'elsewhere', which is not among its outputs \['out'\]"


@pytest.mark.parametrize("processing", ["skip", "dead_letter"])
def test_a_send_to_a_topic_not_among_the_outputs_stops_the_app_from_a_punctuation_or_a_flush_too(
    app_driver: MakeDriver, processing: str
) -> None:
    params = {"output": "elsewhere", "every_ms": 1_000, "stream_every_ms": 1_000_000}
    ticker = app_driver(app("tests.support.driver_apps:Ticker", processing=processing, params=params))
    with pytest.raises(StopAfterCommit, match=rf"processor 'p' failed in a punctuation of task p\[\d\]: {ELSEWHERE}"):
        ticker.advance_wall_clock(1_000)
    flusher = app_driver(app("tests.support.driver_apps:FlushesElsewhere", processing=processing, params=params))
    with pytest.raises(StopAfterCommit, match=rf"processor 'p' failed in flush\(\) of task p\[\d\]: {ELSEWHERE}"):
        flusher.pipe("in", {"n": 1}, key="a")
    assert flusher.counters.skipped == flusher.counters.dead_lettered == 0
