"""The loopback InternalIP each embedded node gets: per cluster, per node, stable, loopback only."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

import pytest

from pykubevirt.cli.cluster_layout import ClusterLayout
from pykubevirt.cli.node_addresses import cluster_subnet, loopback_ip, node_ip


def test_nodes_of_one_cluster_get_distinct_loopback_addresses_in_its_subnet() -> None:
    addresses = [node_ip(Path("/data/one"), n) for n in range(1, 255)]
    assert len(set(addresses)) == 254
    subnet = cluster_subnet(Path("/data/one"))
    assert all(ipaddress.ip_address(a) in subnet and ipaddress.ip_address(a).is_loopback for a in addresses)
    assert node_ip(Path("/data/one"), 2) == str(subnet.network_address + 2)


def test_the_choice_is_stable_and_differs_between_clusters() -> None:
    assert node_ip(Path("/data/one"), 1) == node_ip(Path("/data/one/../one"), 1)
    subnets = {cluster_subnet(Path(f"/data/cluster-{i}")) for i in range(50)}
    assert len(subnets) == 50
    # The host's own 127.0.0.0/24 (the API server) and 127.0.1.0/24 (the hostname's entry) are never chosen.
    reserved = {ipaddress.IPv4Network("127.0.0.0/24"), ipaddress.IPv4Network("127.0.1.0/24")}
    assert not subnets & reserved


def test_node_numbers_outside_a_subnet_are_refused() -> None:
    for ordinal in (0, 255):
        with pytest.raises(ValueError):
            node_ip(Path("/data/one"), ordinal)


def test_node_ip_flag_accepts_only_loopback_addresses() -> None:
    assert loopback_ip("127.3.4.5") == "127.3.4.5"
    for value in ("10.0.0.1", "0.0.0.0", "node01"):
        with pytest.raises(argparse.ArgumentTypeError):
            loopback_ip(value)


def test_up_gives_each_node_agent_and_its_handler_the_same_address() -> None:
    layout = ClusterLayout(Path("/data/one"), node_count=2)
    for ordinal, node in enumerate(layout.node_names, start=1):
        for component in (layout.node_agent(node), layout.handler(node)):
            flag = component.argv.index("--node-ip")
            assert component.argv[flag + 1] == node_ip(Path("/data/one"), ordinal)
    assert layout.node_ip("node01") != layout.node_ip("node02")
