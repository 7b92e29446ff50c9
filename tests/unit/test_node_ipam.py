"""Node IPAM's subnet choice and the CNI result parsing of the pod network. Pure."""

from __future__ import annotations

import pytest

from pykubevirt.controller.node_ipam import CIDRSetFull, free_subnet
from pykubevirt.node import cni
from pykubevirt.node.pod_network import ClusterNetwork


def test_nodes_get_the_first_free_slash_24_in_order() -> None:
    assert free_subnet("10.150.0.0/16", set()) == "10.150.0.0/24"
    assert free_subnet("10.150.0.0/16", {"10.150.0.0/24", "10.150.2.0/24"}) == "10.150.1.0/24"


def test_the_subnet_of_the_host_link_is_never_given_and_a_full_set_is_an_error() -> None:
    taken = {f"10.150.{i}.0/24" for i in range(255)}
    with pytest.raises(CIDRSetFull):
        free_subnet("10.150.0.0/16", taken)
    assert ClusterNetwork("10.150.0.0/16").host_address == "10.150.255.253"
    assert ClusterNetwork("10.150.0.0/16").inner_address == "10.150.255.254"


def test_names_are_short_enough_for_linux_and_differ_per_cluster() -> None:
    first, second = ClusterNetwork("10.150.0.0/16"), ClusterNetwork("10.151.0.0/16")
    assert len(first.host_veth) <= 15 and first.host_veth != second.host_veth and first.netns != second.netns


def test_the_pod_ip_is_the_one_on_the_sandbox_interface() -> None:
    result = {
        "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/run/netns/x"}],
        "ips": [{"interface": 2, "address": "10.150.3.7/24", "gateway": "10.150.3.1"}],
    }
    assert cni.result_ips(result) == ["10.150.3.7"]


def test_host_ports_become_portmap_runtime_config() -> None:
    pod = {"spec": {"containers": [{"ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 22}]}]}}
    assert cni.ports_of(pod) == [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": ""}]
