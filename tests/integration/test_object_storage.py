"""A snapshot location in a bucket of a real S3-compatible server (runtime/devs3/): what a directory does, by key,
and the refusals a directory cannot show: a wrong key, a missing bucket, an object that is not what its manifest
says."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from runtime.devs3.server import LocalS3
from stores.object_storage import CorruptObject, ObjectStorage, ObjectStorageError
from stores.object_url import ObjectUrl


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
    with storage.workspace("totals/b") as workspace:
        (workspace / "partition-0").mkdir()
        (workspace / "partition-0" / "000000.sst").write_bytes(b"sst bytes")
        storage.publish(workspace, "totals/b", "partition-0/000000.sst")
    assert not workspace.exists()  # staged locally only while it is written
    storage.copy("totals/b/partition-0/000000.sst", "totals/c/partition-0/000000.sst")
    checksums = {"partition-0/000000.sst": hashlib.sha256(b"sst bytes").hexdigest()}
    with storage.local_files("totals/c", checksums) as directory:
        assert (directory / "partition-0" / "000000.sst").read_bytes() == b"sst bytes"
    storage.delete_tree("totals/b")
    storage.delete("totals/a/manifest.json")
    assert storage.children("totals") == ["c"]
    listed = object_store.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert [entry["Key"] for entry in listed] == ["app/totals/c/partition-0/000000.sst"]  # all under the prefix


def test_an_object_cut_short_or_missing_and_a_bucket_or_key_that_is_wrong_are_refused_by_name(
    object_store: LocalS3,
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
    missing = ObjectStorage(ObjectUrl.parse(f"s3://no-{bucket}/app"), object_store.client())
    with pytest.raises(ObjectStorageError, match=rf"could not list s3://no-{bucket}/app/totals: NoSuchBucket"):
        missing.children("totals")
    impostor = LocalS3(object_store.data_dir, object_store.port)  # the same server, another key
    refused = ObjectStorage(ObjectUrl.parse(f"s3://{bucket}/app"), impostor.client())
    with pytest.raises(ObjectStorageError, match=rf"could not write s3://{bucket}/app/totals/x: ") as caught:
        refused.write_bytes("totals/x", b"")
    assert impostor.secret_key not in str(caught.value) and object_store.secret_key not in str(caught.value)
