"""Benchmarks of the runtime against a real Kafka broker; they print figures and are not tests."""
