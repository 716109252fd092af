"""The app YAML, validated: every mistake is reported with its path in the file.

One module per section (`kafka`, `topics`, `stores`, `processors`), the whole app and its checks
across sections in `app`, and reading a file in `loading`.
"""

from runtime.config.app import AppConfig, ErrorPolicy, ErrorsConfig, Guarantee, QueueConfig, Rebalance
from runtime.config.common import ConfigError, known_serde, known_topic_serde
from runtime.config.internal_topics import InternalTopicsConfig
from runtime.config.kafka import KafkaConfig
from runtime.config.loading import format_validation_error, load_app, parse_app
from runtime.config.processors import ProcessorConfig
from runtime.config.stores import GlobalStoreConfig, SnapshotsConfig, StoreConfig
from runtime.config.topics import TopicConfig

__all__ = [
    "AppConfig",
    "ConfigError",
    "ErrorPolicy",
    "ErrorsConfig",
    "GlobalStoreConfig",
    "Guarantee",
    "InternalTopicsConfig",
    "KafkaConfig",
    "ProcessorConfig",
    "QueueConfig",
    "Rebalance",
    "SnapshotsConfig",
    "StoreConfig",
    "TopicConfig",
    "format_validation_error",
    "known_serde",
    "known_topic_serde",
    "load_app",
    "parse_app",
]
