"""The app's checkpoints: a name is a complete checkpoint when every store that takes them has a
manifest under it (`<location>/<store>/<name>/manifest.json`) with the input offsets it covers. The
location is a directory or a bucket (stores/snapshot_storage.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import TopicPartition

from runtime.config import AppConfig, SnapshotsConfig
from stores.snapshot import Manifest
from stores.snapshot_location import complete_snapshots


@dataclass(frozen=True)
class CheckpointedStore:
    name: str
    snapshots: SnapshotsConfig
    changelog_topic: str


@dataclass(frozen=True)
class AppCheckpoint:
    """One checkpoint of every checkpointed store of the app."""

    name: str
    manifests: dict[str, Manifest]  # store -> its manifest
    stores: dict[str, CheckpointedStore]  # store -> where its checkpoints are

    @property
    def created_at(self) -> datetime:
        return max(manifest.created_at for manifest in self.manifests.values())

    @property
    def moment(self) -> datetime:
        """The moment it is named after."""
        return datetime.strptime(self.name, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)

    def input_offsets(self) -> dict[TopicPartition, int]:
        """Where each input partition the stores' states cover goes back to; when two processors' stores
        cover one partition at different offsets, the lower: records read twice rather than skipped."""
        offsets: dict[TopicPartition, int] = {}
        for manifest in self.manifests.values():
            for partition, inputs in manifest.input_offsets.items():
                for topic, offset in inputs.items():
                    tp = TopicPartition(topic, partition)
                    offsets[tp] = min(offset, offsets.get(tp, offset))
        return offsets


def checkpointed_stores(app: AppConfig) -> list[CheckpointedStore]:
    """The stores whose checkpoints the workers take: in RocksDB, with a changelog and a snapshot location."""
    found = []
    for processor in app.processors:
        for name, spec in processor.stores.items():
            snapshots = app.snapshots_for(spec)
            if snapshots is not None and spec.backend == "rocksdb" and spec.changelog:
                found.append(CheckpointedStore(name, snapshots, app.changelog_topic(name)))
    return found


def checkpoints(app: AppConfig) -> list[AppCheckpoint]:
    """The app's complete checkpoints, oldest first."""
    stores = checkpointed_stores(app)
    if not stores:
        return []
    found = {
        store.name: {
            snapshot.key.rpartition("/")[2]: snapshot.manifest
            for snapshot in complete_snapshots(store.snapshots.storage(), store.name)
        }
        for store in stores
    }
    complete: list[AppCheckpoint] = []
    for name in sorted(found[stores[0].name]):
        if not all(name in found[store.name] for store in stores):
            continue
        manifests = {store.name: found[store.name][name] for store in stores}
        if all(manifest.input_offsets for manifest in manifests.values()):
            complete.append(AppCheckpoint(name, manifests, {store.name: store for store in stores}))
    return complete
