"""Session windows: one aggregate per (key, session) in a session store; a record joins the sessions
within the gap of it, merging them.

A closed session stays in the store (emitted, when emitting final results) until the store's retention
removes it: a record within the gap of it must be found late, since merging it would change a final
result. The retention (`Session.retention_ms`) keeps it exactly as long as such a record can come.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from processors.stores import SessionStore
from processors.windows.aggregations import Aggregation
from processors.windows.definitions import Session, Window
from processors.windows.windowing import WindowResult, hashable


class SessionWindows:
    def __init__(self, sessions: Session, aggregation: Aggregation, store: SessionStore, final: bool):
        self._sessions = sessions
        self._aggregation = aggregation
        self._store = store
        self._final = final
        self._updates: dict[tuple[Hashable, int, int], tuple[Any, Any]] = {}

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
                self._updates.pop((hashable(key), start, end), None)
        aggregate = aggregation.add(aggregate, value, timestamp)
        store.put(key, session.start, session.end, aggregate)
        if not self._final:
            self._updates[(hashable(key), session.start, session.end)] = (key, aggregate)
        return None

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
        """A session merged into another is not announced: the merged session's update covers it."""
        updates = [
            WindowResult(key, start, end, aggregate) for (_, start, end), (key, aggregate) in self._updates.items()
        ]
        self._updates.clear()
        return updates
