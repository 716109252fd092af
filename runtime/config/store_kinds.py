"""The kinds of task store (`stores.<name>.kind`), the retention that windows and sessions need, and the TTL
that only key-value stores take."""

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


def ttl_fits_kind(ttl_ms: int | None, info: ValidationInfo) -> int | None:
    """Window and session stores expire by their `retention_ms`; a TTL is a key-value store's."""
    kind = info.data.get("kind")
    if ttl_ms is not None and kind in KINDS_IN_TIME:
        raise ValueError(f"a {kind} store expires its entries by retention_ms: only key_value stores take ttl_ms")
    return ttl_ms
