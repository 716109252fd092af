"""How a record of a global store's topic becomes changes of the store."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from processors.record import Record


class GlobalStoreUpdater:
    """The default mirrors the topic: the record's value under its key, a tombstone deletes the key.

    Subclass it to filter or reshape reference rows on their way in (a row marked inactive deletes
    its key, say), so processors read exactly the table they need. One instance per global store
    and process: a large bootstrap runs it in reader processes too (runtime/global_stores/readers.py), so
    it must carry no state from one record to the next. A value handed back as it came (the
    record's own, unchanged value) is stored as the bytes it came in, without encoding it again.
    """

    def changes(self, record: Record) -> Iterable[tuple[Any, Any]]:
        """(key, value) pairs to write, in order; a value of `None` deletes the key."""
        return ((record.key, record.value),)
