"""Event time across a repartition topic (runtime/task/upstream_progress.py): what the reading task makes of the
upstream tasks' stamps, what an upstream task stamps, and, on the test kit, windows held by a stalled upstream
task and closed once it stamps its way on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.task.context import NEVER
from runtime.task.upstream_progress import STAMP_HEADER, ProgressStamps, Stamp, UpstreamProgress
from runtime.testkit import AppDriver

MakeDriver = Callable[..., AppDriver]
STALE_MS = 1000


def test_nothing_passes_until_every_upstream_task_stamped() -> None:
    progress = UpstreamProgress("t", sources=2, stale_after_ms=STALE_MS)
    assert progress.watermark == -1
    progress.take(Stamp(task=0, time=500, caught_up=False, at=10))
    assert progress.watermark == -1, "task 1 has not stamped: it may still send anything"
    progress.take(Stamp(task=1, time=300, caught_up=False, at=20))
    assert progress.watermark == 300


def test_a_caught_up_task_holds_nothing_while_it_keeps_stamping_and_holds_once_it_stops() -> None:
    progress = UpstreamProgress("t", sources=2, stale_after_ms=STALE_MS)
    progress.take(Stamp(task=0, time=500, caught_up=False, at=0))
    progress.take(Stamp(task=1, time=-1, caught_up=True, at=0))  # an empty partition
    assert progress.watermark == 500
    progress.take(Stamp(task=0, time=900, caught_up=False, at=STALE_MS))
    assert progress.watermark == 900, "task 1 stamped within the last second"
    progress.take(Stamp(task=0, time=1200, caught_up=False, at=STALE_MS + 1))
    assert progress.watermark == -1, "task 1 stopped stamping: it is held where it stamped last"
    progress.take(Stamp(task=1, time=-1, caught_up=True, at=STALE_MS + 2))
    assert progress.watermark == 1200


def test_all_caught_up_holds_nothing_and_a_task_stamped_lower_after_a_restart_keeps_its_time() -> None:
    progress = UpstreamProgress("t", sources=2, stale_after_ms=STALE_MS)
    progress.take(Stamp(task=0, time=700, caught_up=True, at=0))
    progress.take(Stamp(task=1, time=800, caught_up=True, at=0))
    assert progress.watermark == NEVER
    progress.take(Stamp(task=1, time=-1, caught_up=False, at=5))  # started again, nothing processed yet
    assert progress.watermark == 800


def test_going_back_to_a_commit_forgets_the_stamps_after_it() -> None:
    progress = UpstreamProgress("t", sources=1, stale_after_ms=STALE_MS)
    progress.take(Stamp(task=0, time=100, caught_up=False, at=0))
    mark = progress.mark()
    progress.take(Stamp(task=0, time=900, caught_up=False, at=5))
    progress.go_back_to(mark)
    assert progress.watermark == 100


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def monotonic(self) -> float:
        return self.now / 1000

    def epoch_ms(self) -> int:
        return self.now


class Appended:
    """What `ProgressStamps` appends, as an `Outputs` takes it."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, Stamp, Any, int | None]] = []

    def append(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Any, partition: int, timestamp_ms: int
    ) -> None:
        assert key is None
        self.records.append((topic, partition, Stamp.decode(value), headers, timestamp_ms))


def test_a_task_stamps_every_partition_when_its_progress_changes_and_again_before_it_would_go_stale() -> None:
    clock, outputs = Clock(), Appended()
    stamps = ProgressStamps(3, {"app-agg-repartition": 2}, clock, refresh_ms=STALE_MS // 3)
    stamps.stamp(outputs, 500, caught_up=False)  # type: ignore[arg-type]
    assert [(topic, partition) for topic, partition, *_ in outputs.records] == [
        ("app-agg-repartition", 0),
        ("app-agg-repartition", 1),
    ]
    _, _, stamp, headers, timestamp = outputs.records[0]
    assert stamp == Stamp(task=3, time=500, caught_up=False, at=0)
    assert list(headers) == [(STAMP_HEADER, b"")] and timestamp == 500
    outputs.records.clear()
    clock.now = STALE_MS // 3 - 1
    stamps.stamp(outputs, 500, caught_up=False)  # type: ignore[arg-type]
    assert outputs.records == [], "nothing changed, and the last stamp is fresh"
    stamps.stamp(outputs, 600, caught_up=False)  # type: ignore[arg-type]
    assert len(outputs.records) == 2
    outputs.records.clear()
    clock.now += STALE_MS // 3
    stamps.stamp(outputs, 600, caught_up=False)  # type: ignore[arg-type]
    assert len(outputs.records) == 2, "refreshed: a reading task must not take it for stalled"


def repartitioned_app() -> dict[str, Any]:
    topic = {"partitions": 2, "key_serde": "str", "value_serde": "json"}
    return {
        "app_id": "regions",
        "topics": {"views": topic, "per-region": topic},
        "processors": [{"name": "count", "class": "processors.windows:Aggregate", "inputs": ["views"],
                        "repartition": {"key": "region", "key_serde": "str"}, "outputs": ["per-region"],
                        "params": {"window": {"type": "tumbling", "size_ms": 100}, "aggregation": {"type": "count"},
                                   "output": "per-region"}}],
    }  # fmt: skip


def test_windows_after_a_repartition_wait_for_a_stalled_upstream_task(app_driver: MakeDriver) -> None:
    """One upstream task stamps that it is behind, at 150 (as a task whose worker was killed stamped last): the
    other's views move no window past it, and the views it sends once it goes on are on time."""
    driver = app_driver(repartitioned_app())
    driver.commit()  # each upstream task stamps once, caught up with an empty partition
    repartition = "regions-count-repartition"
    eu_views = driver.partition_of("views", "v-0")  # the upstream task of the views keyed v-0
    stalled = 1 - eu_views

    def stamp(time: int) -> None:
        value = Stamp(task=stalled, time=time, caught_up=False, at=driver.clock.epoch_ms()).encode()
        for partition in range(2):
            driver.pipe_bytes(repartition, value, headers=[(STAMP_HEADER, b"")], timestamp=time, partition=partition)

    stamp(150)
    driver.pipe_all("views", [("v-0", {"region": "eu"}, t) for t in (10, 120, 230, 340)])
    assert [(r.key, r.value["start"], r.value["value"]) for r in driver.read("per-region")] == [("eu", 0, 1)], (
        "stream time held at 150: [0, 100) closed, [100, 200) open"
    )
    late = next(key for key in ("v-1", "v-2", "v-3", "v-4") if driver.partition_of("views", key) == stalled)
    driver.pipe("views", {"region": "eu"}, late, timestamp=160)  # the stalled task's, then its stamp: caught up
    assert [(r.value["start"], r.value["value"]) for r in driver.read("per-region")] == [(100, 2), (200, 1)]
    assert driver.count("count", "late_records") == 0


def test_a_bounded_run_stamps_only_progress() -> None:
    """`--until-caught-up` stops once its inputs stop growing: a refresh would keep one of them growing."""
    clock, outputs = Clock(), Appended()
    stamps = ProgressStamps(0, {"app-agg-repartition": 1}, clock, refresh_ms=None)
    stamps.stamp(outputs, 500, caught_up=True)  # type: ignore[arg-type]
    clock.now += 60_000
    stamps.stamp(outputs, 500, caught_up=True)  # type: ignore[arg-type]
    assert len(outputs.records) == 1
