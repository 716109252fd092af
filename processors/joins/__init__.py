"""Joins: the one-to-many merge join of seed 001 (`class: processors.joins:MergeJoin`) and the stream-table
join (`processors.joins:TableJoin`), described in docs/joins.md."""

from processors.joins.merge_join import MergeJoin, MergeJoinParams
from processors.joins.table_join import TableJoin, TableJoinParams

__all__ = ["MergeJoin", "MergeJoinParams", "TableJoin", "TableJoinParams"]
