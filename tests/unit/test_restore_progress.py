"""The restore progress bar shows on a terminal and stays silent elsewhere."""

from __future__ import annotations

import io

from rich.console import Console

from runtime.state.restore_progress import RestoreProgress


def test_a_terminal_shows_a_bar_per_partition_being_restored() -> None:
    screen = io.StringIO()
    progress = RestoreProgress(Console(file=screen, force_terminal=True, width=100))
    bar = progress.start("restoring totals[3]", 1000)
    progress.advance(bar, 400)
    progress.finish(bar)
    assert "restoring totals[3]" in screen.getvalue()


def test_elsewhere_nothing_is_drawn() -> None:
    screen = io.StringIO()
    progress = RestoreProgress(Console(file=screen, force_terminal=False))
    bar = progress.start("restoring totals[3]", 1000)
    assert bar is None
    progress.advance(bar, 400)
    progress.finish(bar)
    assert screen.getvalue() == ""


def test_snapshot_rows_and_changelog_records_show_as_such() -> None:
    screen = io.StringIO()
    progress = RestoreProgress(Console(file=screen, force_terminal=True, width=100))
    ingest = progress.start("ingesting snapshot totals[3]", 5000, unit="rows")
    tail = progress.start("restoring totals[3]", 70)
    progress.finish(ingest)
    progress.finish(tail)
    assert "ingesting snapshot totals[3]" in screen.getvalue()
    assert "rows" in screen.getvalue()
    assert "records" in screen.getvalue()
