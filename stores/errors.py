"""Why a store cannot be used, told apart so the engine knows whether to wipe it or wait."""

from __future__ import annotations


class StoreError(Exception):
    """A state store cannot be opened or read."""


class StoreCorrupted(StoreError):
    """The store's files are missing, truncated or fail their checksums.

    Its contents cannot be trusted: the engine wipes the store and restores it from the changelog.
    """


class StoreLocked(StoreError):
    """Another process (or a store in this one that is still open) holds the store's lock.

    Not a corruption: the owner is usually closing it after a rebalance, so retry, never wipe.
    """


class StoreWriteFailed(StoreError):
    """A write did not reach the disk (full, read-only, failing), or the file system refused the store's
    directory when it was opened (no permission, a name too long): the store keeps what it held before.

    Not a corruption either: once the disk is fixed, a restart reopens the store and its changelog
    replays what the failed write would have added.
    """


def layout_refused(store: str, kind: str) -> StoreError:
    """A store that holds keys of another kind's layout (stores/layout.py): its processor declared another
    kind when they were written, and this kind would never read or expire them."""
    return StoreError(
        f"store '{store}' holds entries laid out for another kind than {kind}, the kind its "
        "processor declares now: delete the app's state and changelogs to start it anew "
        "(python -m runtime reset app.yaml --delete-state --delete-changelogs)"
    )
