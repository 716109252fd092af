"""Windows and aggregations over time: the window definitions and aggregations a processor can use
directly, and the built-in `Aggregate` processor that runs them from the app YAML (docs/windows.md)."""

from processors.windows.aggregate import Aggregate
from processors.windows.aggregations import Aggregator
from processors.windows.definitions import Hopping, Session, Sliding, Tumbling, Window, WindowDefinition

__all__ = ["Aggregate", "Aggregator", "Hopping", "Session", "Sliding", "Tumbling", "Window", "WindowDefinition"]
