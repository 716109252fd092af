"""A processor's `stores` and the app's `global_stores`, and where their snapshots are."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from processors.global_updater import GlobalStoreUpdater
from runtime.config.common import Strict, duration_ms, import_subclass, known_serde, valid_topic_name
from runtime.config.store_kinds import retention_fits_kind, ttl_fits_kind
from stores.layout import StoreKind
from stores.object_url import SCHEME, ObjectUrl
from stores.snapshot_storage import SnapshotLocation, SnapshotStorage, open_storage


class SnapshotsConfig(Strict):
    """Where snapshots of stores are found: `<location>/<store>/<any name>/manifest.json`; with `every`,
    the runtime takes checkpoints there itself (`<location>/<store>/<UTC time>/`), keeping the `keep`
    newest of each store and none older than `max_age` (but always the newest). The location is a
    directory every worker sees, or `s3://bucket/prefix` in an S3-compatible object store reached with
    the environment's endpoint and credentials (`AWS_*`).
    """

    location: SnapshotLocation
    every: int | None = Field(default=None, ge=1_000)  # milliseconds, or "30s", "15m", "1h", "1d"
    keep: int | None = Field(default=24, ge=1)  # the newest kept per store; None: as many as max_age allows
    max_age: int | None = Field(default=None, ge=1_000)  # older checkpoints are deleted (the newest never)

    _durations = field_validator("every", "max_age", mode="before")(classmethod(lambda cls, given: duration_ms(given)))

    @field_validator("location", mode="before")
    @classmethod
    def _directory_or_bucket(cls, location: object) -> object:
        if isinstance(location, str) and "://" in location:
            if not location.startswith(SCHEME):
                raise ValueError(f"'{location}' is a URL; give a directory, or s3://bucket/prefix for an object store")
            return ObjectUrl.parse(location)
        return location

    def storage(self) -> SnapshotStorage:
        """The location opened: an object store's client is made from the environment here."""
        return open_storage(self.location)


class RocksDBConfig(Strict):
    """What every RocksDB store of a worker shares: `memory_mb` bounds their block cache and memtables
    together (stores/rocksdb.py `SharedMemory`), however many stores and partitions the worker has."""

    memory_mb: int = Field(default=64, ge=8)


class StoreConfig(Strict):
    """A task-local store of a `kind`: key-value, window or session. With a changelog it survives crashes
    and moves with its partition."""

    kind: StoreKind = "key_value"
    backend: Literal["memory", "rocksdb"] = "rocksdb"
    changelog: bool = True
    key_serde: str = "msgpack"
    value_serde: str = "msgpack"
    retention_ms: int | None = Field(default=None, gt=0, validate_default=True)
    ttl_ms: int | None = Field(default=None, gt=0)  # milliseconds of stream time, or "30s", "15m", "1h", "1d"
    snapshots: SnapshotsConfig | None = None

    _serdes_exist = field_validator("key_serde", "value_serde")(classmethod(lambda cls, name: known_serde(name)))
    _retention_fits_kind = field_validator("retention_ms")(
        classmethod(lambda cls, retention_ms, info: retention_fits_kind(retention_ms, info))
    )
    _a_duration = field_validator("ttl_ms", mode="before")(classmethod(lambda cls, ttl: duration_ms(ttl)))
    _ttl_fits_kind = field_validator("ttl_ms")(classmethod(lambda cls, ttl_ms, info: ttl_fits_kind(ttl_ms, info)))

    @model_validator(mode="after")
    def _snapshots_need_rocksdb_and_changelog(self) -> StoreConfig:
        if self.snapshots is not None and (self.backend != "rocksdb" or not self.changelog):
            raise ValueError("snapshots are ingested into RocksDB stores with a changelog only")
        if self.snapshots is not None and self.ttl_ms is not None:
            raise ValueError("snapshots are built of key-value stores without ttl_ms, and of window and session stores")
        return self


class TableConfig(Strict):
    """A compacted topic, co-partitioned with the processor's inputs, materialized into a task-local store
    (`ctx.table(name)`): the topic itself is the store's changelog, so there is no second copy.

    With `history_ms` the store keeps each key's versions by their timestamps for that long, so a stream
    record joins the value its key had at the record's time (stores/versioned.py)."""

    topic: str
    backend: Literal["memory", "rocksdb"] = "rocksdb"
    history_ms: int | None = Field(default=None, gt=0)  # milliseconds of stream time, or "30s", "15m", "1h", "1d"

    _valid_topic = field_validator("topic")(classmethod(lambda cls, name: valid_topic_name(name)))
    _a_duration = field_validator("history_ms", mode="before")(classmethod(lambda cls, given: duration_ms(given)))

    @field_validator("history_ms", mode="before")
    @classmethod
    def _not_a_bool(cls, given: object) -> object:
        if isinstance(given, bool):
            raise ValueError("history_ms is a positive number of milliseconds, not a boolean")
        return given


class GlobalStoreConfig(Strict):
    """Reference data: the whole topic replicated into every worker, read before any record is processed."""

    topic: str
    backend: Literal["memory", "rocksdb"] = "rocksdb"
    key_serde: str = "msgpack"
    value_serde: str = "msgpack"
    updater: str | None = None
    errors: Literal["skip", "dead_letter"] = "skip"
    snapshots: SnapshotsConfig | None = None

    _serdes_exist = field_validator("key_serde", "value_serde")(classmethod(lambda cls, name: known_serde(name)))
    _valid_topic = field_validator("topic")(classmethod(lambda cls, name: valid_topic_name(name)))

    @field_validator("updater")
    @classmethod
    def _class_is_updater(cls, path: str | None) -> str | None:
        if path is not None:
            import_subclass(path, GlobalStoreUpdater, "global store updater")
        return path

    @model_validator(mode="after")
    def _snapshots_need_rocksdb(self) -> GlobalStoreConfig:
        if self.snapshots is not None and self.backend != "rocksdb":
            raise ValueError("snapshots are ingested into RocksDB stores only")
        return self
