"""`--workers N` without processes: the restart policy (backoff, reset, bound), exits named, options checked."""

from __future__ import annotations

import signal

import pytest

from runtime.cli import main
from runtime.worker.restarts import RestartPolicy, Restarts
from runtime.worker.supervisor import describe_exit

POLICY = RestartPolicy(max_restarts=5, healthy_after_s=60, first_delay_s=1, max_delay_s=30)


def test_each_death_in_a_row_doubles_the_wait_up_to_the_bound_then_gives_up() -> None:
    restarts = Restarts(POLICY)
    assert [restarts.after_death(ran_for_s=2) for _ in range(6)] == [1, 2, 4, 8, 16, None]
    assert restarts.deaths_in_a_row == 6


def test_the_wait_stops_growing_at_its_ceiling() -> None:
    restarts = Restarts(RestartPolicy(max_restarts=10, first_delay_s=1, max_delay_s=5))
    assert [restarts.after_death(ran_for_s=0) for _ in range(5)] == [1, 2, 4, 5, 5]


def test_a_run_that_lasted_resets_the_count_however_long_the_waits_made_the_crash_loop() -> None:
    restarts = Restarts(POLICY)
    assert [restarts.after_death(ran_for_s=59) for _ in range(3)] == [1, 2, 4]
    assert restarts.after_death(ran_for_s=60) == 1, "a healthy run: the next death starts over"
    assert restarts.after_death(ran_for_s=3600) == 1
    assert [restarts.after_death(ran_for_s=1) for _ in range(5)] == [2, 4, 8, 16, None]


def test_no_restarts_allowed_gives_up_at_the_first_death() -> None:
    assert Restarts(RestartPolicy(max_restarts=0)).after_death(ran_for_s=3600) is None


def test_an_exit_names_its_status_or_its_signal() -> None:
    assert describe_exit(1) == "exited with status 1"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert describe_exit(-99) == "was killed by signal 99"


@pytest.mark.parametrize("option", [["--workers", "0"], ["--workers", "two"], ["--max-restarts", "-1"]])
def test_a_worker_count_or_restart_bound_out_of_range_is_a_usage_error(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["app.yaml", *option])
    assert exit_.value.code == 2
    assert f"argument {option[0]}: '{option[1]}' is not a whole number of at least" in capsys.readouterr().err
