"""A topic of reference data full of records its global store cannot apply is told in a few lines, not one
with a stack trace per record."""

from __future__ import annotations

import logging
from collections import namedtuple

import pytest

from runtime.config import GlobalStoreConfig
from runtime.counters import Counters
from runtime.global_stores.changes import Failed
from runtime.global_stores.store import ApplyFailure, GlobalStore, set_aside
from stores import open_backend

pytestmark = pytest.mark.anyio
Raw = namedtuple("Raw", "topic partition offset timestamp key value headers")


async def nothing(store: GlobalStore, failed: list[Failed]) -> None:
    return None


async def test_a_burst_of_records_the_store_cannot_apply_is_told_in_full_five_times_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.global_stores.store")
    store = GlobalStore("terminals", GlobalStoreConfig(topic="terminals"), open_backend("memory"), None, nothing)
    failed: list[Failed] = []
    for offset in range(200):
        raw = Raw("terminals", 0, offset, 1_700_000_000_000, b"t%d" % offset, b"?", [])
        error = KeyError("terminalId")
        failed.append((raw, error))
        store.failures.append(ApplyFailure("terminals", 0, offset, raw.timestamp, raw.key, repr(error), "Traceback"))
    counters = Counters()
    await set_aside(store, failed, None, None, counters)
    told = [record.getMessage() for record in caplog.records if "could not apply" in record.getMessage()]
    assert [line.split(" key=")[0].rsplit("@", 1)[1].split(" ")[0] for line in told] == ["0", "1", "2", "3", "4"]
    assert counters.global_store_errors == 200 and counters.skipped == 200
    store.told.flush()
    assert (
        caplog.records[-1]
        .getMessage()
        .startswith("195 records global store terminals could not apply, not logged one by one")
    ), caplog.records[-1].getMessage()
