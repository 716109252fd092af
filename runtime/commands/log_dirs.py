"""How many bytes each partition takes on disk: Kafka's DescribeLogDirs request (v1), which aiokafka's
admin client does not make, built with aiokafka's own protocol types."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Int64, Schema, String

API_KEY = 35


class DescribeLogDirsResponseV1(Response):  # type: ignore[misc]
    API_KEY = API_KEY
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            Array(
                ("error_code", Int16),
                ("log_dir", String("utf-8")),
                (
                    "topics",
                    Array(
                        ("name", String("utf-8")),
                        (
                            "partitions",
                            Array(
                                ("partition_index", Int32),
                                ("partition_size", Int64),
                                ("offset_lag", Int64),
                                ("is_future_key", Boolean),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


class DescribeLogDirsRequestV1(RequestStruct):  # type: ignore[misc]
    API_KEY = API_KEY
    API_VERSION = 1
    RESPONSE_TYPE = DescribeLogDirsResponseV1
    SCHEMA = Schema(("topics", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))))


class DescribeLogDirsRequest(Request[DescribeLogDirsRequestV1]):  # type: ignore[misc]
    API_KEY = API_KEY

    def __init__(self, partitions: dict[str, list[int]]):
        self._partitions = partitions

    def build(self, request_struct_class: type[DescribeLogDirsRequestV1]) -> DescribeLogDirsRequestV1:
        return request_struct_class(list(self._partitions.items()))


async def partition_sizes(client: AIOKafkaClient, leaders: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Bytes of each (topic, partition)'s log on its leader (the `leaders` map names the broker); a
    partition a broker does not report (no leader, a log dir offline) is left out."""
    asked: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (topic, partition), broker in leaders.items():
        asked[broker][topic].append(partition)
    sizes: dict[tuple[str, int], int] = {}
    for broker, partitions in asked.items():
        response: Any = await client.send(broker, DescribeLogDirsRequest(dict(partitions)))
        for error_code, _, topics in response.results:
            if error_code != 0:
                continue
            for topic, entries in topics:
                for partition, size, _, future in entries:
                    if not future and (topic, partition) in leaders:
                        sizes[(topic, partition)] = sizes.get((topic, partition), 0) + size
    return sizes
