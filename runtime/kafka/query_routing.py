"""Which worker owns which partition, for the store queries: told by the group's leader in each member's
assignment, so that every worker knows every other's query address without a topic of its own.

Each member puts its query address in its subscription's user data; the leader assigns by range, as
the runtime always does, and hands every member the whole map from address to partitions in the
assignment's user data. From a member's next join (its partitions were revoked: a rebalance runs) until
its new assignment arrives, it knows of no owner, and a query is told the group is rebalancing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from runtime.kafka.aiokafka_internals import (
    ClusterMetadata,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

Owners = dict[tuple[str, int], str]
"""The query address of the worker that owns each topic partition."""


class RoutingAssignor(RangePartitionAssignor):  # type: ignore[misc]
    """Range assignment, with each member's query address carried through the group's join.

    Named `range` as the plain assignor is: workers with and without queries still agree on one protocol;
    a member that gives no address is left out of the map, and the keys it owns are told as owned by none.
    """

    def __init__(self, address: str):
        self.address = address
        self.owners: Owners | None = None  # None: rebalancing, no assignment known

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        self.owners = None
        return ConsumerProtocolMemberMetadata(
            self.version, list(topics), json.dumps({"address": self.address}).encode()
        )

    def assign(
        self, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        assignments = super().assign(cluster, members)
        owners = encoded_owners(
            {address_of(members[member]): assignment.assignment for member, assignment in assignments.items()}
        )
        return {
            member: ConsumerProtocolMemberAssignment(assignment.version, assignment.assignment, owners)
            for member, assignment in assignments.items()
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.owners = decoded_owners(assignment.user_data)


def address_of(metadata: ConsumerProtocolMemberMetadata) -> str | None:
    """The query address a member joined with; none from a member without queries, or one it cannot read."""
    try:
        address = json.loads(metadata.user_data or b"null")
    except ValueError:
        return None
    return address.get("address") if isinstance(address, dict) else None


def encoded_owners(assignments: Mapping[str | None, Iterable[tuple[str, list[int]]]]) -> bytes:
    """{address: {topic: [partitions]}} as JSON, the members without an address left out."""
    return json.dumps(
        {
            address: {topic: list(partitions) for topic, partitions in assignment}
            for address, assignment in assignments.items()
            if address is not None
        }
    ).encode()


def decoded_owners(user_data: bytes) -> Owners:
    """The map the leader sent; empty when the leader gave none (it runs without queries)."""
    try:
        by_address = json.loads(user_data or b"{}")
    except ValueError:
        return {}
    return {
        (topic, partition): address
        for address, topics in by_address.items()
        for topic, partitions in topics.items()
        for partition in partitions
    }
