"""Re-keying: the built-in stage a processor's `repartition:` puts before it (docs/joins.md, "Repartitioning")."""

from processors.repartition.rekey import Rekey, RekeyParams, checked_key

__all__ = ["Rekey", "RekeyParams", "checked_key"]
