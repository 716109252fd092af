"""Joins: the one-to-many merge join of CDC rows with their transactions (`class: processors.joins:MergeJoin`),
the stream-table join (`processors.joins:TableJoin`) and the stream-stream join (`processors.joins:WindowJoin`),
in docs/joins.md."""

from processors.joins.merge_join import MergeJoin, MergeJoinParams
from processors.joins.table_join import TableJoin, TableJoinParams
from processors.joins.window_join import WindowJoin, WindowJoinParams

__all__ = ["MergeJoin", "MergeJoinParams", "TableJoin", "TableJoinParams", "WindowJoin", "WindowJoinParams"]
