"""A real Apache Kafka broker from Maven Central for development, examples and tests."""

from runtime.devkafka.broker import LocalBroker
from runtime.devkafka.jars import DevKafkaError, kafka_version

__all__ = ["DevKafkaError", "LocalBroker", "kafka_version"]
