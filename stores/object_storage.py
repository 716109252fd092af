"""A snapshot location in an S3-compatible object store, through boto3.

The endpoint and credentials come from the environment as for any AWS client (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, a profile, or a role where the workers run),
so the YAML names only the bucket and prefix, and no secret ever passes through the runtime's config or
logs. A PUT is atomic, so a manifest written last still marks a complete snapshot.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from stores.errors import StoreError
from stores.object_url import ObjectUrl
from stores.snapshot import SnapshotError
from stores.snapshot_storage import SnapshotStorage

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client
    from types_boto3_s3.type_defs import ObjectIdentifierTypeDef

MISSING = ("404", "NoSuchKey", "NotFound")
# Path-style addressing works with every S3-compatible server (and AWS); virtual hosts need DNS for each bucket.
CLIENT_CONFIG = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"})


class ObjectStorageError(StoreError):
    """The object store refused or could not be reached; says which object and why, never a credential."""


class CorruptObject(SnapshotError):
    """An object's bytes are not those the manifest lists: corrupt, or partly written by another tool."""


def s3_client() -> S3Client:
    return boto3.session.Session().client("s3", config=CLIENT_CONFIG)


class ObjectStorage(SnapshotStorage):
    def __init__(self, url: ObjectUrl, client: S3Client | None = None):
        self.url = url
        try:
            self._client = client if client is not None else s3_client()
        except BotoCoreError as error:  # e.g. AWS_PROFILE names no profile
            raise ObjectStorageError(f"no client for {url} can be made from the environment: {error}") from None

    def describe(self, key: str = "") -> str:
        return f"s3://{self.url.bucket}/{self.url.key(key)}"

    def children(self, key: str) -> list[str]:
        prefix = self.url.key(key)
        prefix = f"{prefix}/" if prefix else ""
        names: set[str] = set()
        with self._failing("list", key):
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.url.bucket, Prefix=prefix, Delimiter="/"
            ):
                names.update(entry["Prefix"][len(prefix) :].rstrip("/") for entry in page.get("CommonPrefixes", []))
                names.update(entry["Key"][len(prefix) :] for entry in page.get("Contents", []))
        return sorted(name for name in names if name)

    def read_bytes(self, key: str) -> bytes | None:
        try:
            with self._failing("read", key):
                return self._client.get_object(Bucket=self.url.bucket, Key=self.url.key(key))["Body"].read()
        except _Missing:
            return None

    def exists(self, key: str) -> bool:
        try:
            with self._failing("look for", key):
                self._client.head_object(Bucket=self.url.bucket, Key=self.url.key(key))
        except _Missing:
            return False
        return True

    def write_bytes(self, key: str, data: bytes) -> None:
        with self._failing("write", key):
            self._client.put_object(Bucket=self.url.bucket, Key=self.url.key(key), Body=data)
        self._uploaded(len(data))

    def delete(self, key: str) -> None:
        with self._failing("delete", key):
            self._client.delete_object(Bucket=self.url.bucket, Key=self.url.key(key))

    def delete_tree(self, key: str) -> None:
        prefix = f"{self.url.key(key)}/"
        with self._failing("delete", key):
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.url.bucket, Prefix=prefix):
                keys: list[ObjectIdentifierTypeDef] = [{"Key": entry["Key"]} for entry in page.get("Contents", [])]
                if keys:
                    self._client.delete_objects(Bucket=self.url.bucket, Delete={"Objects": keys, "Quiet": True})

    def copy(self, source: str, target: str) -> None:
        with self._failing("copy", source):
            self._client.copy_object(
                Bucket=self.url.bucket,
                Key=self.url.key(target),
                CopySource={"Bucket": self.url.bucket, "Key": self.url.key(source)},
            )

    def put_file(self, path: Path, key: str) -> None:
        with self._failing("upload", key):
            self._client.upload_file(str(path), self.url.bucket, self.url.key(key))
        self._uploaded(path.stat().st_size)

    def fetch_file(self, key: str, target: Path, sha256: str) -> None:
        self._download(key, target, sha256)

    @contextlib.contextmanager
    def local_files(self, key: str, checksums: dict[str, str]) -> Iterator[Path]:
        directory = Path(tempfile.mkdtemp(prefix="snapshot-"))
        try:
            for name, expected in checksums.items():
                self._download(f"{key}/{name}", directory / name, expected)
            yield directory
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _download(self, key: str, target: Path, sha256: str) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._failing("download", key):
                self._client.download_file(self.url.bucket, self.url.key(key), str(target))
        except _Missing:
            raise CorruptObject(f"{self.describe(key)} is listed in its manifest but missing") from None
        digest = hashlib.sha256()
        with open(target, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != sha256:
            raise CorruptObject(
                f"{self.describe(key)} is corrupt or partly written: sha256 {digest.hexdigest()}, "
                f"the manifest says {sha256}"
            )

    @contextlib.contextmanager
    def _failing(self, action: str, key: str) -> Iterator[None]:
        """The client's errors as one of ours, naming the object; a missing object as `_Missing`."""
        try:
            yield
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in MISSING:
                raise _Missing from None
            raise ObjectStorageError(f"could not {action} {self.describe(key)}: {code or error}") from None
        except BotoCoreError as error:
            raise ObjectStorageError(f"could not {action} {self.describe(key)}: {error}") from None


class _Missing(Exception):
    """The object is not there (a 404): a normal answer to a read, not a failure."""
