"""The kinds of task store (`stores.<name>.kind`), and the retention that windows and sessions need."""

from __future__ import annotations

from pydantic import ValidationInfo

from stores.layout import StoreKind

KINDS_IN_TIME: tuple[StoreKind, ...] = ("window", "window_by_time", "session")


def retention_fits_kind(retention_ms: int | None, info: ValidationInfo) -> int | None:
    """A window or session store keeps its entries for `retention_ms` of stream time; a key-value
    store keeps its keys until they are deleted, so it takes none."""
    kind = info.data.get("kind")  # absent when the kind itself is invalid: that error is reported
    if retention_ms is None and kind in KINDS_IN_TIME:
        raise ValueError(f"a {kind} store needs retention_ms: how long (ms of stream time) it keeps a {kind}")
    if retention_ms is not None and kind == "key_value":
        raise ValueError(
            "a key_value store keeps its keys until deleted: only window, window_by_time and session stores take it"
        )
    return retention_ms
