"""The one-to-many merge join of two inputs ordered by the same id, as a CDC pipeline joins a CDC connector's
`data` rows (many partitions) with its `transaction` records (one partition, read whole by every task).

Both inputs come in id order: a partition of `data` holds its rows in the order of their
transactions, and `transactions` holds every transaction once, after its rows were written. So the
join looks at the two heads only. When the data row's id equals the transaction's, the row is joined
and taken (the transaction stays, for its next rows); when the row's id is above it, no row of that
transaction is left in this partition and the transaction is taken; when it is below, the row's
transaction has passed (a duplicate, or a row whose transaction record was lost) and the row is sent
to `unmatched_topic`, or counted and dropped. With either queue empty it waits: the row of a
transaction may not have been fetched yet, nor a row's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from processors.context import Context
from processors.merge import MergeProcessor
from processors.params import among_inputs, among_outputs, processor_context
from processors.record import Record

UNMATCHED = "unmatched_rows"  # ctx.count name: a row whose transaction had passed


class MergeJoinParams(BaseModel):
    """`params` of `processors.joins:MergeJoin` (docs/joins.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: str  # the many side: a partitioned input
    transactions: str  # the one side: a broadcast input (or co-partitioned with `data`)
    data_id: str  # the field of a data row's value that holds its transaction's id
    transaction_id: str  # the field of a transaction's value that holds its id
    output: str
    unmatched_topic: str | None = None

    _data_is_an_input = field_validator("data")(classmethod(lambda cls, topic, info: among_inputs(topic, info)))
    _among_outputs = field_validator("output", "unmatched_topic")(
        classmethod(lambda cls, topic, info: among_outputs(topic, info))
    )

    @field_validator("transactions")
    @classmethod
    def _an_input_or_broadcast(cls, topic: str, info: ValidationInfo) -> str:
        context = processor_context(info)
        inputs, broadcast = context.get("inputs"), context.get("broadcast", [])
        if inputs is not None and topic not in [*inputs, *broadcast]:
            raise ValueError(f"topic '{topic}' is among neither the processor's inputs nor its broadcast inputs")
        if topic == info.data.get("data"):
            raise ValueError("the data and the transactions are two topics")
        return topic


class MergeJoin(MergeProcessor):
    """Sends each data row joined with its transaction to `params.output`: the row's key, the value
    `{"data": <row>, "transaction": <transaction>}`, the row's headers and timestamp."""

    Params: ClassVar[type[MergeJoinParams]] = MergeJoinParams

    def init(self, ctx: Context) -> None:
        params = self.Params.model_validate(ctx.params)
        self.data, self.transactions = params.data, params.transactions
        self.data_id, self.transaction_id = params.data_id, params.transaction_id
        self.output, self.unmatched_topic = params.output, params.unmatched_topic
        self.transaction: Any = None  # the value of the transaction the chosen row joins, if it does
        self.problem: str | None = None  # why the chosen record goes to the error policy

    def choose(self, heads: Mapping[str, Record]) -> str | None:
        row, transaction = heads.get(self.data), heads.get(self.transactions)
        if row is None or transaction is None:
            return None
        try:
            row_id, transaction_id = row.value[self.data_id], transaction.value[self.transaction_id]
            if row_id == transaction_id:
                self.transaction = transaction.value
                return self.data
            self.transaction = None
            if row_id > transaction_id:
                return self.transactions  # no row of it is left in this partition
            return self.data  # its transaction has passed
        except (KeyError, TypeError, IndexError):
            return self._for_the_policy(row, transaction)

    def _for_the_policy(self, row: Record, transaction: Record) -> str:
        """The record that lacks its id (or the row, when the ids do not compare), taken so that `process`
        raises for it and the error policy has it."""
        self.transaction = None
        if _lacks(transaction.value, self.transaction_id):
            self.problem = f"transaction has no field '{self.transaction_id}': {transaction.value!r}"
            return self.transactions
        if _lacks(row.value, self.data_id):
            self.problem = f"data row has no field '{self.data_id}': {row.value!r}"
        else:
            row_id, transaction_id = row.value[self.data_id], transaction.value[self.transaction_id]
            self.problem = f"data row's id {row_id!r} and transaction id {transaction_id!r} do not compare"
        return self.data

    def process(self, record: Record, ctx: Context) -> None:
        if self.problem is not None:
            problem, self.problem = self.problem, None
            raise ValueError(problem)
        if record.topic == self.transactions:
            return
        transaction, self.transaction = self.transaction, None
        if transaction is not None:
            ctx.send(
                self.output, {"data": record.value, "transaction": transaction}, key=record.key, headers=record.headers
            )
            return
        if self.unmatched_topic is not None:
            ctx.send(self.unmatched_topic, record.value, key=record.key, headers=record.headers)
        ctx.count(UNMATCHED)


def _lacks(value: Any, field: str) -> bool:
    return not isinstance(value, dict) or field not in value
