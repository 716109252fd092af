"""The replication factor a new topic is created with, for the engine and the Spark jobs alike.

`-1` asks for the broker's own `default.replication.factor`, as Kafka Streams does since KIP-733. The
broker takes -1 in CreateTopics from version 4 on, but aiokafka sends version 3 at most (and its
`NewTopic` refuses -1), so the default is read from the cluster and sent as a number.
"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

from stores.broker_configs import BrokerConfigsRefused, broker_configs

BROKER_DEFAULT = -1
DEFAULT_REPLICATION_FACTOR = "default.replication.factor"


class BrokerDefaultUnknown(Exception):
    """The cluster did not tell its default replication factor (an ACL without DescribeConfigs on it);
    `code` is the error code it answered with."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class ReplicationFactors:
    """Resolves the asked replication factors against one cluster, reading its default at most once."""

    def __init__(self, admin: AIOKafkaAdminClient) -> None:
        self._admin = admin
        self._broker_default: int | None = None

    async def resolve(self, asked: int) -> int:
        """`asked`, or the broker's default when it is -1."""
        if asked != BROKER_DEFAULT:
            return asked
        if self._broker_default is None:
            self._broker_default = await broker_default(self._admin)
        return self._broker_default


async def broker_default(admin: AIOKafkaAdminClient) -> int:
    """`default.replication.factor` as the cluster has it (the topic's creator in a ZooKeeper cluster; in
    KRaft the brokers and controllers share the setting)."""
    try:
        value = (await broker_configs(admin, [DEFAULT_REPLICATION_FACTOR])).get(DEFAULT_REPLICATION_FACTOR)
    except BrokerConfigsRefused as refused:
        raise BrokerDefaultUnknown(str(refused), refused.code) from refused
    return 1 if value is None else int(value)  # Kafka's own default, when a broker does not say
