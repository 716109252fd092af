"""The stream-table join: each record of a stream joined with the value its key has in one of the
processor's tables (`tables:` in the YAML), as Kafka Streams' KStream-KTable join.

The table is the task's partition of a compacted topic co-partitioned with the stream, and the task takes
the table's records and the stream's in timestamp order: a stream record sees each table update older
than it, and none younger, so it joins the table as of its own time. A table without history keeps each
key's latest value: an update that comes out of order, older than the value it replaces, still replaces
it, and a stream record that comes after a younger update (the stream lags) joins that update. A table
with `history_ms` keeps each key's versions, and the join reads the one valid at the stream record's
timestamp (`get_as_of`), as Kafka Streams joins a versioned table (KIP-914).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from processors.context import Context
from processors.keyless import KEYLESS
from processors.params import among_outputs, processor_context
from processors.processor import Processor
from processors.record import Record

UNJOINED = "unjoined_records"  # ctx.count name: a stream record an inner join dropped


class TableJoinParams(BaseModel):
    """`params` of `processors.joins:TableJoin` (docs/joins.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str  # one of the processor's `tables`
    output: str
    join: Literal["inner", "left"] = "inner"

    _among_outputs = field_validator("output")(classmethod(lambda cls, topic, info: among_outputs(topic, info)))

    @field_validator("table")
    @classmethod
    def _a_table_of_the_processor(cls, table: str, info: ValidationInfo) -> str:
        tables = processor_context(info).get("tables")
        if tables is not None and table not in tables:
            raise ValueError(f"'{table}' is not among the processor's tables {sorted(tables)}")
        return table


class TableJoin(Processor):
    """Sends each stream record to `params.output` with its key, its headers and its timestamp, the value
    `{"stream": <its value>, "table": <the table's value of its key>}`. An inner join drops (and counts,
    `unjoined_records`) a record whose key the table lacks; a left join sends it with `"table": null`.

    A record without a key finds no row (a compacted topic holds no record without a key), as in Kafka
    Streams: an inner join drops it and counts it apart (`keyless_records`), a left join sends it with
    `"table": null`."""

    Params: ClassVar[type[TableJoinParams]] = TableJoinParams

    def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        self.table = ctx.table(params.table)
        self.versioned = self.table.history_ms is not None
        self.output, self.inner = params.output, params.join == "inner"

    def process(self, record: Record, ctx: Context) -> None:
        if record.key is None:
            found = None
        elif self.versioned:
            found = self.table.get_as_of(record.key, record.timestamp)
        else:
            found = self.table.get(record.key)
        if found is None and self.inner:
            ctx.count(UNJOINED if record.key is not None else KEYLESS)
            return
        ctx.send(self.output, {"stream": record.value, "table": found}, key=record.key, headers=record.headers)
