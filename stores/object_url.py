"""`s3://bucket/prefix`: a snapshot location in an S3-compatible object store."""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEME = "s3://"
# S3's rules for a bucket's name: 3 to 63 lowercase letters, digits, dots and hyphens.
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class ObjectUrl:
    bucket: str
    prefix: str = ""  # without a leading or trailing '/'; empty for the bucket's top

    @classmethod
    def parse(cls, url: str) -> ObjectUrl:
        if not url.startswith(SCHEME):
            raise ValueError(f"'{url}' is not an s3:// URL (s3://bucket/prefix)")
        bucket, _, prefix = url[len(SCHEME) :].partition("/")
        if "@" in bucket:
            raise ValueError(
                f"'{url}' holds credentials: give them in the environment (AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY, or a profile or role), never in the location"
            )
        if not BUCKET.fullmatch(bucket):
            raise ValueError(f"'{url}' names no valid bucket: 3 to 63 lowercase letters, digits, '.' and '-'")
        if "?" in prefix or "#" in prefix or any(part in (".", "..") for part in prefix.split("/")):
            raise ValueError(f"'{url}' has a prefix an object store would not take as written")
        return cls(bucket, prefix.strip("/"))

    def key(self, relative: str) -> str:
        """The object key of a key relative to the location."""
        return "/".join(part for part in (self.prefix, relative) if part)

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"
