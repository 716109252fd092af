"""Snapshot locations: `s3://bucket/prefix` read as a bucket and prefix, and a directory read and written by key
(the object store's side runs against a real server: tests/integration/test_object_store_snapshots.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stores.object_url import ObjectUrl
from stores.snapshot_storage import DirectoryStorage


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "key"),
    [
        ("s3://snapshots", "snapshots", "", "totals/a/manifest.json"),
        ("s3://snapshots/", "snapshots", "", "totals/a/manifest.json"),
        ("s3://snapshots/bank/prod/", "snapshots", "bank/prod", "bank/prod/totals/a/manifest.json"),
    ],
)
def test_an_s3_url_names_a_bucket_and_a_prefix_that_keys_go_under(url: str, bucket: str, prefix: str, key: str) -> None:
    parsed = ObjectUrl.parse(url)
    assert (parsed.bucket, parsed.prefix) == (bucket, prefix)
    assert parsed.key("totals/a/manifest.json") == key
    assert ObjectUrl.parse(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("s3://AKIA:secret@snapshots/x", "holds credentials"),
        ("s3://Snapshots/x", "names no valid bucket"),
        ("s3://ab/x", "names no valid bucket"),
        ("s3://snapshots/../x", "prefix an object store would not take"),
        ("gs://snapshots/x", "is not an s3:// URL"),
    ],
)
def test_a_url_an_object_store_would_refuse_or_misread_is_refused(url: str, refused: str) -> None:
    with pytest.raises(ValueError, match=refused):
        ObjectUrl.parse(url)


def test_a_directory_is_read_and_written_by_key_and_a_write_is_whole(tmp_path: Path) -> None:
    storage = DirectoryStorage(tmp_path)
    assert storage.read_bytes("totals/a/manifest.json") is None and storage.children("totals") == []
    storage.write_bytes("totals/a/manifest.json", b"{}")
    storage.write_bytes("totals/b/partition-0.json", b"[]")
    assert storage.children("totals") == ["a", "b"] and storage.children("totals/a") == ["manifest.json"]
    assert storage.exists("totals/a/manifest.json") and not storage.exists("totals/a")
    assert sorted(path.name for path in (tmp_path / "totals" / "a").iterdir()) == ["manifest.json"]  # no temporary
    storage.copy("totals/a/manifest.json", "totals/c/manifest.json")
    assert (tmp_path / "totals/c/manifest.json").stat().st_ino == (tmp_path / "totals/a/manifest.json").stat().st_ino
    storage.delete_tree("totals/a")
    storage.delete("totals/b/partition-0.json")
    assert storage.children("totals") == ["b", "c"] and storage.children("totals/b") == []
