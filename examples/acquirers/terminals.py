"""The reference table `terminal_acquirer` (terminal id -> acquirer id), as a JDBC source connector
publishes it: one JSON row per change, keyed by the terminal id, into a compacted topic."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from processors import GlobalStoreUpdater, Record


def table_row(row_id: int, terminal_id: str, acquirer_id: str, active: bool, updated_ms: int) -> tuple[bytes, bytes]:
    """A row's key and value bytes, field for field as the connector's JSON converter writes them."""
    row = {"id": row_id, "terminalId": terminal_id, "acquirerId": acquirer_id, "isActive": active,
           "updateDate": updated_ms}  # fmt: skip
    return terminal_id.encode(), json.dumps(row).encode()


class ActiveTerminals(GlobalStoreUpdater):
    """Keeps terminal id -> acquirer id of the active rows: a deactivated row (or a tombstone) removes
    its terminal, so a payment at that terminal finds no acquirer."""

    def changes(self, record: Record) -> Iterable[tuple[Any, Any]]:
        row = record.value
        if row is None:
            return ((record.key, None),)
        terminal, acquirer, active = row["terminalId"], row["acquirerId"], row["isActive"]
        if not isinstance(terminal, str) or not isinstance(acquirer, str) or not isinstance(active, bool):
            raise ValueError(f"row {row.get('id')} has a field of the wrong type: {row}")
        return ((terminal, acquirer if active else None),)
