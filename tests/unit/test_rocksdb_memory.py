"""One memory budget for every RocksDB store of a worker: blocks and memtables together stay within it,
however many databases are open."""

from __future__ import annotations

import copy
import platform
from pathlib import Path

import pytest

from runtime.config import ConfigError, parse_app
from stores.heap import fix_mmap_threshold
from stores.rocksdb import MB, SHARED_MEMORY, RocksDBBackend, SharedMemory
from tests.unit.test_config_cli import VALID


def test_the_budget_bounds_the_cache_and_half_of_it_the_memtables() -> None:
    memory = SharedMemory(16)
    cache, memtables = memory.parts()
    assert memory.budget_bytes == 16 * MB and memtables.get_buffer_size() == 8 * MB
    memory.set_budget(32)  # databases already open follow it
    assert memtables.get_buffer_size() == 16 * MB and memory.parts()[0] is cache


def test_the_memtables_half_is_shared_out_among_the_open_databases() -> None:
    memory = SharedMemory(64)
    assert [memory._share(count) for count in (1, 4, 6, 24, 96, 1000)] == [
        8 * MB,
        8 * MB,
        4 * MB,
        MB,
        256 * 1024,
        256 * 1024,
    ]  # 32 MB over them, a power of two between 256 KB and 8 MB


def test_many_databases_written_hard_stay_within_the_budget(tmp_path: Path) -> None:
    before = SHARED_MEMORY.budget_bytes // MB
    SHARED_MEMORY.set_budget(16)
    try:
        databases = [RocksDBBackend(tmp_path / str(partition)) for partition in range(24)]
        assert SHARED_MEMORY.next_write_buffer_bytes() == 256 * 1024
        value, peak = bytes(40), 0
        for round_ in range(100):  # 24 x 100 x 200 keys: about 30 MB of memtables, flushed as they fill
            for number, database in enumerate(databases):
                database.write([(b"%d-%d-%d" % (number, round_, key), value) for key in range(200)], round_)
                peak = max(peak, SHARED_MEMORY.usage_bytes())
        for database in databases:
            database.close()
        assert 0 < peak <= 16 * MB
        assert SHARED_MEMORY.next_write_buffer_bytes() == 8 * MB  # all closed: the next one has the whole half
    finally:
        SHARED_MEMORY.set_budget(before)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_malloc_serves_large_blocks_with_mmap_unless_the_operator_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert fix_mmap_threshold()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert not fix_mmap_threshold()
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert not fix_mmap_threshold()


def test_the_budget_is_in_the_yaml_and_has_a_floor() -> None:
    assert parse_app(VALID).rocksdb.memory_mb == 64
    app = copy.deepcopy(VALID)
    app["rocksdb"] = {"memory_mb": 4}
    with pytest.raises(ConfigError, match=r"rocksdb.memory_mb"):
        parse_app(app)
