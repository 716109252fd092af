"""Which files an incremental checkpoint uploads, which shared files an old one leaves behind, and which
checkpoints retention removes: by count, by age, never the newest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stores.checkpoint_files import Dated, expired, shared_key, stored_file, to_upload, unreferenced

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def test_only_files_not_stored_yet_are_uploaded_and_the_same_number_with_other_bytes_is_another_file() -> None:
    old = stored_file(0, "000009.sst", 200_000, "a" * 64)
    same_number_elsewhere = stored_file(0, "000009.sst", 200_000, "b" * 64)  # a store restored elsewhere
    new = stored_file(0, "000021.sst", 1_300, "c" * 64)
    manifest = stored_file(0, "MANIFEST-000005", 1_000, "d" * 64)
    assert old.key == "_shared/partition-0/000009-" + "a" * 16 + ".sst"
    assert manifest.key == "_shared/partition-0/MANIFEST-000005-" + "d" * 16
    assert shared_key(1, "000009.sst", "a" * 64).startswith("_shared/partition-1/")
    present = ["000009-" + "a" * 16 + ".sst", "000013-" + "e" * 16 + ".sst"]
    assert to_upload([old, same_number_elsewhere, new, manifest], present) == [same_number_elsewhere, new, manifest]
    assert to_upload([old], present) == []


def test_a_shared_file_is_deleted_only_when_no_checkpoint_names_it() -> None:
    kept = [stored_file(0, "000009.sst", 10, "a" * 64), stored_file(0, "CURRENT", 16, "f" * 64)]
    present = [file.key.rpartition("/")[2] for file in kept] + ["000005-" + "9" * 16 + ".sst"]
    assert unreferenced(present, kept) == ["000005-" + "9" * 16 + ".sst"]
    assert unreferenced(present, [*kept, stored_file(0, "000005.sst", 10, "9" * 64)]) == []
    assert unreferenced([], kept) == []


def hourly(count: int) -> list[Dated]:
    """`count` checkpoints, one an hour, the newest an hour before NOW."""
    return [Dated(f"c{hour:02d}", NOW - timedelta(hours=count - hour)) for hour in range(count)]


def test_retention_keeps_the_newest_by_count_and_by_age_and_never_the_newest() -> None:
    checkpoints = hourly(5)  # c00 is 5 h old ... c04 1 h old
    assert expired(checkpoints, 3, None, NOW) == ["c00", "c01"]
    assert expired(list(reversed(checkpoints)), 3, None, NOW) == ["c00", "c01"]  # by when they were made
    assert expired(checkpoints, None, timedelta(hours=2, minutes=30), NOW) == ["c00", "c01", "c02"]
    assert expired(checkpoints, 4, timedelta(hours=3, minutes=30), NOW) == ["c00", "c01"]  # whichever removes more
    assert expired(checkpoints, 10, None, NOW) == []
    assert expired(checkpoints, None, timedelta(minutes=1), NOW) == ["c00", "c01", "c02", "c03"]  # not the newest
    assert expired(checkpoints, 1, None, NOW) == ["c00", "c01", "c02", "c03"]
    assert expired([], 1, timedelta(minutes=1), NOW) == []


def test_two_workers_pruning_at_once_delete_the_same_or_the_one_with_the_older_view_fewer() -> None:
    seen_first = hourly(5)[:4]  # one worker has not seen the newest checkpoint yet
    seen_later = hourly(5)
    older, newer = set(expired(seen_first, 3, None, NOW)), set(expired(seen_later, 3, None, NOW))
    assert older <= newer and {each.name for each in seen_later} - newer == {"c02", "c03", "c04"}
