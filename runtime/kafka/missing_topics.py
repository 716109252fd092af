"""A topic missing from the cluster told once: the Kafka client's repeated messages about it folded, and the
topic noted for the worker to check.

When a topic the clients use is deleted, aiokafka asks for its metadata again and again and logs each answer
("Topic x not found in cluster metadata"), besides every produce, offset commit and offset request refused
for it (UnknownTopicOrPartitionError): tens of thousands of lines a minute, and nothing else says what
happened. The first message about a topic passes as it is; the rest are counted, not printed, until the
topic is seen in the cluster again (`present`). The topics it told of are `suspects`: the worker asks the
broker whether they still exist (runtime/worker/topic_watch.py), rather than asking every few records.
"""

from __future__ import annotations

import logging
from collections import Counter

from aiokafka import TopicPartition

# aiokafka's messages whose first argument is the topic's name.
NAMING_THE_TOPIC = ("Topic %s not found in cluster metadata", "OffsetFetchRequest -- unknown topic %s")
# Said in the messages of a request refused for a partition of a topic that is not there.
UNKNOWN_TOPIC = ("unknowntopicorpartition", "unknown topic or partition")


def missing_topic(record: logging.LogRecord) -> str | None:
    """The topic an aiokafka message says is missing, if it says so."""
    args = record.args if isinstance(record.args, tuple) else ()
    if record.msg in NAMING_THE_TOPIC and args:
        return str(args[0])
    message = record.getMessage().lower()
    if not any(words in message for words in UNKNOWN_TOPIC):
        return None
    return next((arg.topic for arg in args if isinstance(arg, TopicPartition)), None)


class MissingTopics(logging.Filter):
    """Installed on the log handlers, as the broker outages' filter is."""

    def __init__(self) -> None:
        super().__init__()
        self.folded: Counter[str] = Counter()  # client messages not printed, by topic

    @property
    def suspects(self) -> set[str]:
        """The topics the client said are missing since they were last seen."""
        return set(self.folded)

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("aiokafka") or record.levelno < logging.WARNING:
            return True
        topic = missing_topic(record)
        if topic is None:
            return True
        told = topic in self.folded
        self.folded[topic] += told  # the first message is printed: a count of 0 keeps the topic a suspect
        return not told

    def present(self, topic: str) -> int:
        """The topic is in the cluster: its next missing message is printed again. How many were not."""
        return self.folded.pop(topic, 0)


MISSING_TOPICS = MissingTopics()
