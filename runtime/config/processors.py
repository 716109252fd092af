"""A processor in the `processors` list: its class, inputs, outputs, params and stores."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from processors.merge import MergeProcessor
from processors.processor import Processor
from processors.repartition import checked_key
from runtime.config.common import MAX_PARTITIONS, NAME, Strict, import_subclass, known_serde
from runtime.config.processor_params import checked_params, with_stores_params_need
from runtime.config.stores import StoreConfig, TableConfig
from stores.serdes import import_object


class ConcurrencyOrder(StrEnum):
    KEY = "key"  # records with the same key in offset order; different keys overlap
    PARTITION = "partition"  # one record at a time, in offset order
    NONE = "none"  # any order


class ConcurrencyConfig(Strict):
    """How many of a task's records its processor works on at once (runtime/task/in_flight.py)."""

    max_in_flight: int = Field(default=1, ge=1, le=100_000)
    order: ConcurrencyOrder = ConcurrencyOrder.PARTITION

    @model_validator(mode="after")
    def _partition_order_is_one_at_a_time(self) -> ConcurrencyConfig:
        if self.order is ConcurrencyOrder.PARTITION and self.max_in_flight > 1:
            raise ValueError(
                "order 'partition' processes one record at a time; with max_in_flight above 1, "
                "choose order 'key' (in order per key) or 'none'"
            )
        return self

    @property
    def concurrent(self) -> bool:
        return self.order is not ConcurrencyOrder.PARTITION


class RepartitionConfig(Strict):
    """Re-key the processor's inputs through a topic of the app's own, `<app>-<processor>-repartition`, so
    that its tasks are co-partitioned on the new key (a stage `processors.repartition:Rekey` in front)."""

    key: str  # a field of the value, or module:function(record) -> key
    partitions: int | None = Field(default=None, ge=1, le=MAX_PARTITIONS)  # default: the inputs'
    key_serde: str = "msgpack"

    _key_is_valid = field_validator("key")(classmethod(lambda cls, key: checked_key(key)))
    _serde_exists = field_validator("key_serde")(classmethod(lambda cls, name: known_serde(name)))


class ProcessorConfig(Strict):
    name: str = Field(pattern=NAME)
    class_path: str = Field(alias="class")
    inputs: list[str] = Field(min_length=1)
    # Read whole by every task of the processor, each at its own position, kept in the task's state.
    broadcast: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    # Store name -> a compacted topic co-partitioned with the inputs, looked up with ctx.table(name).
    tables: dict[str, TableConfig] = Field(default_factory=dict)
    repartition: RepartitionConfig | None = None
    _repartition_topic: str | None = PrivateAttr(default=None)  # set by the app: the topic it reads instead
    params: dict[str, Any] = Field(default_factory=dict)
    stores: dict[str, StoreConfig] = Field(default_factory=dict, validate_default=True)  # the class may add some
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)

    _params_fit_class = field_validator("params")(classmethod(lambda cls, params, info: checked_params(params, info)))
    _stores_params_need = field_validator("stores", mode="before")(
        classmethod(lambda cls, stores, info: with_stores_params_need(stores, info))
    )

    @field_validator("stores")
    @classmethod
    def _store_names(cls, stores: dict[str, StoreConfig]) -> dict[str, StoreConfig]:
        for name in stores:
            if not re.match(NAME, name):
                raise ValueError(f"store name '{name}' may only use letters, digits, '_' and '-'")
            if name == "global":
                raise ValueError("store name 'global' is reserved: global stores live in <state_dir>/<app_id>/global")
        return stores

    @field_validator("class_path")
    @classmethod
    def _class_is_processor(cls, path: str) -> str:
        import_subclass(path, Processor, "processor")
        return path

    @field_validator("tables")
    @classmethod
    def _tables_are_inputs_of_their_own(
        cls, tables: dict[str, TableConfig], info: ValidationInfo
    ) -> dict[str, TableConfig]:
        for name, table in tables.items():
            if not re.match(NAME, name):
                raise ValueError(f"table name '{name}' may only use letters, digits, '_' and '-'")
            if table.topic in (*info.data.get("inputs", []), *info.data.get("broadcast", [])):
                raise ValueError(f"{name}: topic '{table.topic}' is also an input; a topic is read one way")
        topics = [table.topic for table in tables.values()]
        if len(set(topics)) < len(topics):
            raise ValueError(f"a topic is the table of two stores: {sorted(topics)}")
        return tables

    @field_validator("broadcast")
    @classmethod
    def _neither_twice_nor_an_input(cls, broadcast: list[str], info: ValidationInfo) -> list[str]:
        for topic in broadcast:
            if topic in info.data.get("inputs", []):
                raise ValueError(f"topic '{topic}' is also under inputs; an input is one or the other")
        if len(set(broadcast)) < len(broadcast):
            raise ValueError(f"a topic is listed twice in {broadcast}")
        return broadcast

    @model_validator(mode="after")
    def _broadcast_positions_store(self) -> ProcessorConfig:
        """A task's positions in its broadcast inputs live in a store of its own, changelogged, so they
        commit with everything else (in the transaction, under exactly-once)."""
        if not self.broadcast:
            return self
        store = self.broadcast_positions_store
        if store in self.stores or store in self.tables:
            raise ValueError(f"stores.{store}: the name is the processor's broadcast positions' store")
        self.stores[store] = StoreConfig(backend="rocksdb", changelog=True)
        return self

    @model_validator(mode="after")
    def _concurrency_takes_records_as_they_come(self) -> ProcessorConfig:
        """Records in flight together are taken as they come: not chosen one at a time by a merge
        processor, nor ordered against a table's updates (a record would see the table as of a later time)."""
        if not self.concurrency.concurrent:
            return self
        if self.chooses_records:
            raise ValueError("concurrency: a merge processor chooses its records one at a time; it takes none")
        if self.tables:
            raise ValueError(
                "concurrency: a processor with tables processes its records one at a time, in "
                "timestamp order with the tables' updates"
            )
        return self

    @model_validator(mode="after")
    def _a_merge_chooses_among_its_inputs(self) -> ProcessorConfig:
        """`repartition:` puts every input through one topic: a merge processor would have nothing to choose."""
        if self.repartition is not None and self.chooses_records:
            raise ValueError("repartition: a merge processor chooses among its inputs, which one topic would merge")
        return self

    @model_validator(mode="after")
    def _tables_are_not_stores(self) -> ProcessorConfig:
        for name in self.tables:
            if name in self.stores:
                raise ValueError(f"tables.{name}: the name is also one of the processor's stores")
        return self

    def table_topics(self) -> list[str]:
        return [table.topic for table in self.tables.values()]

    @property
    def repartition_topic(self) -> str | None:
        """The app's topic this processor reads, re-keyed, in place of its inputs (with `repartition:`)."""
        return self._repartition_topic

    def reading_repartition(self, topic: str) -> ProcessorConfig:
        """This processor, reading `topic` in place of its inputs."""
        copy = self.model_copy(update={"inputs": [topic]})
        copy._repartition_topic = topic
        return copy

    @property
    def broadcast_positions_store(self) -> str:
        return f"{self.name}-broadcast-positions"

    @property
    def chooses_records(self) -> bool:
        """A merge processor: it chooses which input's record it takes next."""
        return issubclass(self.processor_class(), MergeProcessor)

    def processor_class(self) -> type[Processor]:
        found: type[Processor] = import_object(self.class_path)
        return found
