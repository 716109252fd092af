"""A local cluster's nodes: one quorum, one cluster id, each with its own ports and data dir."""

from __future__ import annotations

from pathlib import Path

from runtime.devkafka.certificates import Certificates
from runtime.devkafka.cluster import LocalCluster
from runtime.devkafka.secured import Security


def _properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_three_nodes_share_a_quorum_and_nothing_else(tmp_path: Path) -> None:
    security = Security(Certificates(tmp_path / "certs", "k", "c"), {"admin": "a-pw", "alice": "b-pw"})
    cluster = LocalCluster(tmp_path, size=3, security=security)
    written = []
    for node in cluster.nodes:
        node.data_dir.mkdir(parents=True)
        written.append(_properties(node._write_properties()))
    voters = {properties["controller.quorum.voters"] for properties in written}
    assert len(voters) == 1 and voters.pop().count("@127.0.0.1:") == 3
    assert [properties["node.id"] for properties in written] == ["1", "2", "3"]
    assert len({node.cluster_id for node in cluster.nodes}) == 1
    ports = [port for node in cluster.nodes for port in (node.port, node.controller_port, *node.secured_ports.values())]
    assert len(ports) == len(set(ports)) == 3 * 9
    assert len({properties["log.dirs"] for properties in written}) == 3
    assert {properties["offsets.topic.replication.factor"] for properties in written} == {"3"}
    assert cluster.address("SASL_SSL").count(",") == 2
    assert all(properties["super.users"] == "User:admin" for properties in written)
