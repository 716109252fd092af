"""The collector's settings: a bulk read's threshold holds only while it runs."""

from __future__ import annotations

import gc
import weakref

import pytest

from runtime.garbage_collection import BULK_THRESHOLD, bulk_allocations, freeze_what_lives


def test_bulk_allocations_raise_the_young_threshold_and_restore_it_even_after_an_error() -> None:
    before = gc.get_threshold()
    with bulk_allocations():
        assert gc.get_threshold() == (BULK_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), bulk_allocations():
        raise RuntimeError("the bootstrap failed")
    assert gc.get_threshold() == before


def test_what_lives_is_frozen_and_garbage_is_not() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    garbage = weakref.ref(Cycle())  # a cycle: only a collection frees it
    kept = Cycle()
    frozen_before = gc.get_freeze_count()
    try:
        freeze_what_lives()
        assert gc.get_freeze_count() > frozen_before
        assert garbage() is None, "garbage is collected, not frozen"
        assert kept.me is kept
    finally:
        gc.unfreeze()
