"""One broker's settings, as DescribeConfigs reads them: what the engine and the Spark jobs check an app
against (the default replication factor, the session timeouts a group member may ask for)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType


class BrokerConfigsRefused(Exception):
    """The broker did not tell its settings (an ACL without DescribeConfigs on the cluster); `code` is the
    error code it answered with."""

    def __init__(self, broker: int, names: list[str], message: str, code: int):
        super().__init__(f"broker {broker} did not tell its {', '.join(names)}: {message} (error {code})")
        self.code = code


async def broker_configs(admin: AIOKafkaAdminClient, names: Iterable[str]) -> dict[str, str | None]:
    """`names` as the controller the metadata names has them, else the first broker (in KRaft the brokers
    and controllers share such settings); a name the broker does not know is left out."""
    cluster: dict[str, Any] = await admin.describe_cluster()
    broker = cluster["controller_id"] if cluster["controller_id"] >= 0 else cluster["brokers"][0]["node_id"]
    asked = list(names)
    wanted = ConfigResource(ConfigResourceType.BROKER, str(broker), dict.fromkeys(asked))
    values: dict[str, str | None] = {}
    for response in await admin.describe_configs([wanted]):
        for code, message, _, _, entries in response.resources:
            if code != 0:
                raise BrokerConfigsRefused(broker, asked, message, code)
            values |= {name: value for name, value, *_ in entries}
    return values
