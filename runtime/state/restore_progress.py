"""Restore progress as a live bar when stderr is a terminal (logs and counters report it otherwise)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn


class RestoreProgress:
    """One bar per store partition being restored (snapshot rows, then changelog records); nothing at all
    when not on a terminal."""

    def __init__(self, console: Console | None = None):
        self._console = console or Console(stderr=True)
        self._progress: Progress | None = None
        self._active = 0

    @property
    def enabled(self) -> bool:
        return self._console.is_terminal

    def start(self, description: str, total: int, unit: str = "records") -> TaskID | None:
        if not self.enabled:
            return None
        if self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"),
                TimeRemainingColumn(),
                console=self._console,
                transient=True,
            )
            self._progress.start()
        self._active += 1
        return self._progress.add_task(description, total=total, unit=unit)

    def advance(self, bar: TaskID | None, records: int) -> None:
        if bar is not None and self._progress is not None:
            self._progress.advance(bar, records)

    def finish(self, bar: TaskID | None) -> None:
        if bar is None or self._progress is None:
            return
        self._progress.remove_task(bar)
        self._active -= 1
        if self._active == 0:
            self._progress.stop()
            self._progress = None
