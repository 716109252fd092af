"""Which worker owns which partition, for the store queries: told by the group's leader in each member's
assignment, so that every worker knows every other's query address without a topic of its own.

Each member puts its query address in its subscription's user data, and the leader hands every member
the whole map from address to partitions in the assignment's user data (runtime/kafka/group_assignor.py).
Under an eager rebalance, from a member's next join (its partitions were revoked) until its new assignment
arrives, it knows of no owner, and a query is told the group is rebalancing; under a cooperative one the
map stays true until the new assignment replaces it, as no partition moves before its owner revokes it.

The map is the assignment's `owners` field: the user data are JSON objects of named fields (the standbys
have theirs beside it), and a field a member does not know of is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

Owners = dict[tuple[str, int], str]
"""The query address of the worker that owns each topic partition."""


def owners_by_address(
    assignments: Mapping[str | None, Iterable[tuple[str, list[int]]]],
) -> dict[str, dict[str, list[int]]]:
    """{address: {topic: [partitions]}}, the members without an address left out."""
    return {
        address: {topic: list(partitions) for topic, partitions in assignment}
        for address, assignment in assignments.items()
        if address is not None
    }


def json_object(user_data: bytes | None) -> dict[str, Any]:
    """Named fields, or none from data that is not a JSON object (an older member's, or damaged)."""
    try:
        fields = json.loads(user_data or b"{}")
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


def decoded_owners(user_data: bytes | None) -> Owners:
    """The map the leader sent; empty when the leader gave none. A leader of a version before named fields sent
    the map alone (no address is called `owners`)."""
    fields = json_object(user_data)
    by_address = fields.get("owners", fields)
    if not isinstance(by_address, dict):
        return {}
    return {
        (topic, partition): address
        for address, topics in by_address.items()
        for topic, partitions in topics.items()
        for partition in partitions
    }
