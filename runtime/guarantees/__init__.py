"""The delivery guarantees: how and when each one commits a task's work to Kafka."""
