"""Joins: the built-in one-to-many merge join of seed 001 (`class: processors.joins:MergeJoin`), described
in docs/joins.md."""

from processors.joins.merge_join import MergeJoin, MergeJoinParams

__all__ = ["MergeJoin", "MergeJoinParams"]
