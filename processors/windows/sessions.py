"""Session windows: one aggregate per (key, session) in a session store; a record joins the sessions
within the gap of it, merging them.

A closed session stays in the store (emitted, when emitting final results) until the store's retention
removes it: a record within the gap of it must be found late, since merging it would change a final
result. The retention (`Session.retention_ms`) keeps it exactly as long as such a record can come.

Emitting updates, a session merged into another one after an update of it was sent is announced removed
before the merged session's update, as Kafka Streams forwards a tombstone for each replaced session: a
reader adding up the sessions' updates would count it twice otherwise. A session the last commit found
in the store was sent then, so one created since is the only kind that needs no notice.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from processors.stores import SessionStore
from processors.windows.aggregations import Aggregation
from processors.windows.definitions import Session, Window
from processors.windows.early import EveryRecords
from processors.windows.windowing import WindowResult, hashable


class SessionWindows:
    def __init__(
        self,
        sessions: Session,
        aggregation: Aggregation,
        store: SessionStore,
        final: bool,
        *,
        changes: bool = False,
        every_records: EveryRecords | None = None,
    ):
        self._sessions = sessions
        self._aggregation = every_records or aggregation
        self._store = store
        self._final = final
        self._tracks = not final or changes
        self._every_records = every_records
        self._due: list[WindowResult] = []
        self.closes_every_ms = 1  # a window closes a fixed time after a record's: at any millisecond
        self._updates: dict[tuple[Hashable, int, int], tuple[Any, Any]] = {}
        self._created: set[tuple[Hashable, int, int]] = set()  # since the last commit: never sent
        self._removed: dict[tuple[Hashable, int, int], Any] = {}  # sent, then merged away: their keys

    def add(self, key: Any, value: Any, timestamp: int, stream_time: int) -> str | None:
        sessions, aggregation, store = self._sessions, self._aggregation, self._store
        if sessions.is_late(timestamp, stream_time):
            return f"the session it would start closed at {sessions.close_time(sessions.window_for(timestamp))}"
        joined = list(store.find(key, *sessions.reach(timestamp)))
        for start, end, _ in joined:
            closed_at = sessions.close_time(Window(start, end))
            if stream_time >= closed_at:
                return f"it falls within the gap of session [{start}, {end}], which closed at {closed_at}"
        session = sessions.window_for(timestamp)
        aggregate = aggregation.initial() if not joined else joined[0][2]
        for position, (start, end, joined_aggregate) in enumerate(joined):
            session = sessions.merged(session, Window(start, end))
            if position:
                aggregate = aggregation.merge(aggregate, joined_aggregate)
        for start, end, _ in joined:
            if (start, end) != session:  # a record inside a session leaves it where it is
                store.delete(key, start, end)
                if self._tracks:
                    self._replaced(key, start, end)
        aggregate = aggregation.add(aggregate, value, timestamp)
        store.put(key, session.start, session.end, aggregate)
        due = self._every_records is not None and self._every_records.is_due(aggregate)
        if due:
            self._due.append(WindowResult(key, session.start, session.end, aggregate))
        if self._tracks:
            updated = (hashable(key), session.start, session.end)
            if due:  # sent now: unchanged since, and announced removed if it merges later
                self._updates.pop(updated, None)
                self._created.discard(updated)
            else:
                if all((start, end) != session for start, end, _ in joined):
                    self._created.add(updated)
                self._updates[updated] = (key, aggregate)
        return None

    def _replaced(self, key: Any, start: int, end: int) -> None:
        """A session merged into another: its pending update goes, and if one was sent, a removal notice."""
        where = (hashable(key), start, end)
        self._updates.pop(where, None)
        if where in self._created:
            self._created.discard(where)
        else:
            self._removed[where] = key

    def close(self, previous: int, stream_time: int) -> list[WindowResult]:
        """Sessions close at end + gap + 1 + grace: those ending in this range closed now."""
        if not self._final or previous < 0:
            return []
        lead = self._sessions.gap_ms + 1 + self._sessions.grace_ms
        return [
            WindowResult(key, start, end, aggregate)
            for key, start, end, aggregate in self._store.fetch_all(previous - lead + 1, stream_time - lead)
        ]

    def take_updates(self) -> list[WindowResult]:
        """The removal notices of the sessions merged away since the last commit, then the sessions' updates:
        a key's notices come before the update of the session they merged into."""
        removed = [WindowResult(key, start, end, None, removed=True) for (_, start, end), key in self._removed.items()]
        updates = [
            WindowResult(key, start, end, aggregate) for (_, start, end), (key, aggregate) in self._updates.items()
        ]
        self._updates.clear()
        self._created.clear()
        self._removed.clear()
        return removed + updates

    def take_due(self) -> list[WindowResult]:
        due, self._due = self._due, []
        return due
