"""Built-in de-duplication: a record whose id was seen within a time window is dropped."""

from processors.dedup.deduplicate import Deduplicate, DeduplicateParams

__all__ = ["Deduplicate", "DeduplicateParams"]
