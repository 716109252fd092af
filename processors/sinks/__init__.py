"""Built-in sinks: processors that write their records out of Kafka, exactly once."""

from processors.sinks.postgres import PostgresSink, PostgresSinkParams

__all__ = ["PostgresSink", "PostgresSinkParams"]
