"""A snapshot location in a bucket of a real S3-compatible server (runtime/devs3/): what a directory does, by key,
and the refusals a directory cannot show: a wrong key, a missing bucket, an object that is not what its manifest
says; a checkpoint after a small change uploads only the files it does not share with the one before, and
pruning deletes only files no kept checkpoint names."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runtime.config import SnapshotsConfig
from runtime.devs3.server import LocalS3
from runtime.guarantees.store_checkpoints import prune
from stores.checkpoint import assemble, collect_garbage, fetch_database, write_partition_checkpoint
from stores.object_storage import CorruptObject, ObjectStorage, ObjectStorageError
from stores.object_url import ObjectUrl
from stores.rocksdb import RocksDBBackend
from stores.snapshot_location import complete_snapshots


def test_a_bucket_is_read_and_written_by_key_under_its_prefix(object_store: LocalS3, tmp_path: Path) -> None:
    bucket = f"storage-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(bucket)
    storage = ObjectStorage(ObjectUrl.parse(f"s3://{bucket}/app"), object_store.client())
    assert storage.read_bytes("totals/a/manifest.json") is None and storage.children("totals") == []
    storage.write_bytes("totals/a/manifest.json", b"{}")
    storage.write_bytes("totals/b/partition-0.json", b"[]")
    assert storage.children("totals") == ["a", "b"] and storage.children("totals/a") == ["manifest.json"]
    assert storage.children("") == ["totals"] and storage.exists("totals/a/manifest.json")
    assert not storage.exists("totals/z/manifest.json")
    (tmp_path / "000000.sst").write_bytes(b"sst bytes")
    storage.put_file(tmp_path / "000000.sst", "totals/b/partition-0/000000.sst")
    assert storage.uploaded_bytes == len(b"{}[]sst bytes")  # every byte written is counted
    storage.copy("totals/b/partition-0/000000.sst", "totals/c/partition-0/000000.sst")
    checksums = {"partition-0/000000.sst": hashlib.sha256(b"sst bytes").hexdigest()}
    with storage.local_files("totals/c", checksums) as directory:
        assert (directory / "partition-0" / "000000.sst").read_bytes() == b"sst bytes"
    storage.fetch_file("totals/c/partition-0/000000.sst", tmp_path / "fetched.sst", checksums["partition-0/000000.sst"])
    assert (tmp_path / "fetched.sst").read_bytes() == b"sst bytes"
    storage.delete_tree("totals/b")
    storage.delete("totals/a/manifest.json")
    assert storage.children("totals") == ["c"]
    listed = object_store.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert [entry["Key"] for entry in listed] == ["app/totals/c/partition-0/000000.sst"]  # all under the prefix


def test_an_object_cut_short_or_missing_and_a_bucket_or_key_that_is_wrong_are_refused_by_name(
    object_store: LocalS3, tmp_path: Path
) -> None:
    bucket = f"storage-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(bucket)
    storage = ObjectStorage(ObjectUrl.parse(f"s3://{bucket}/app"), object_store.client())
    storage.write_bytes("totals/a/partition-0/000000.sst", b"sst by")  # the upload stopped half-way
    whole = {"partition-0/000000.sst": hashlib.sha256(b"sst bytes").hexdigest()}
    cut = rf"s3://{bucket}/app/totals/a/partition-0/000000.sst is corrupt or partly written"
    with pytest.raises(CorruptObject, match=cut), storage.local_files("totals/a", whole):
        pass
    gone = rf"s3://{bucket}/app/totals/b/partition-0/000000.sst is listed in its manifest but missing"
    with pytest.raises(CorruptObject, match=gone), storage.local_files("totals/b", whole):
        pass
    with pytest.raises(CorruptObject, match=cut):
        storage.fetch_file("totals/a/partition-0/000000.sst", tmp_path / "cut.sst", whole["partition-0/000000.sst"])
    missing = ObjectStorage(ObjectUrl.parse(f"s3://no-{bucket}/app"), object_store.client())
    with pytest.raises(ObjectStorageError, match=rf"could not list s3://no-{bucket}/app/totals: NoSuchBucket"):
        missing.children("totals")
    impostor = LocalS3(object_store.data_dir, object_store.port)  # the same server, another key
    refused = ObjectStorage(ObjectUrl.parse(f"s3://{bucket}/app"), impostor.client())
    with pytest.raises(ObjectStorageError, match=rf"could not write s3://{bucket}/app/totals/x: ") as caught:
        refused.write_bytes("totals/x", b"")
    assert impostor.secret_key not in str(caught.value) and object_store.secret_key not in str(caught.value)


def test_a_checkpoint_after_a_small_change_uploads_a_fraction_of_the_first_and_pruning_keeps_what_is_named(
    object_store: LocalS3, tmp_path: Path
) -> None:
    bucket = f"storage-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(bucket)
    location = f"s3://{bucket}/app"
    storage = ObjectStorage(ObjectUrl.parse(location), object_store.client())
    store = RocksDBBackend(tmp_path / "store")
    for batch in range(2):  # two SST files of 10,000 keys each: four would start a compaction, rewriting them
        store.write([(b"k%06d" % key, b"v" * 40) for key in range(batch * 10_000, (batch + 1) * 10_000)], batch + 1)
        store.checkpoint(tmp_path / "flushed")  # a checkpoint flushes the memtable into an SST file
        shutil.rmtree(tmp_path / "flushed")

    def checkpoint(name: str, offset: int) -> int:
        """Bytes uploaded for the checkpoint, as the storage counts them."""
        before = storage.uploaded_bytes
        store.checkpoint(tmp_path / name)
        write_partition_checkpoint(tmp_path / name, storage, f"totals/{name}", 0, {"payments": offset})
        assert assemble(storage, f"totals/{name}", app="bank", store="totals", partitions=1, key_serde="str",
                        value_serde="msgpack", changelog_topic="bank-totals-changelog", kind="key_value")  # fmt: skip
        return storage.uploaded_bytes - before

    first = checkpoint("20261129T100000Z", 20_000)
    store.write([(b"k000007", b"changed"), (b"k019999", None)], 5)
    second = checkpoint("20261129T110000Z", 20_002)
    assert first > 100_000 and 0 < second < first / 20

    settings = SnapshotsConfig.model_validate({"location": location, "keep": 1})
    assert prune(storage, "totals", settings, datetime.now(UTC)) == ["20261129T100000Z"]
    assert collect_garbage(storage, "totals", 0)  # what only the first checkpoint named
    (newest,) = complete_snapshots(storage, "totals")
    files = newest.manifest.files[0]
    assert sorted(storage.children("totals/_shared/partition-0")) == sorted(Path(file.key).name for file in files)
    fetch_database(storage, newest.key, files, tmp_path / "restored")
    restored = RocksDBBackend(tmp_path / "restored")
    assert list(restored.items()) == list(store.items()) and restored.changelog_offset() == 5
    restored.close()
    store.close()
