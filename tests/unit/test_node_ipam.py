"""Node IPAM's subnet choice (both families), the dual-stack conflist and the CNI result parsing of the pod network.
Pure, but for conflist files under a temporary directory."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from pykubevirt.cli import cluster_network
from pykubevirt.controller.node_ipam import CIDRSetFull, free_subnet, free_subnet_v6, split_cluster_cidr
from pykubevirt.node import cni, pod_network
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


def test_a_dual_stack_cluster_cidr_gives_each_node_a_free_ipv6_slash_64_never_the_host_links() -> None:
    assert free_subnet_v6("fd70:6b76:96::/48", set()) == "fd70:6b76:96::/64"
    taken = {"fd70:6b76:96::/64", "10.150.1.0/24"}
    assert free_subnet_v6("fd70:6b76:96::/48", taken) == "fd70:6b76:96:1::/64"
    assert split_cluster_cidr("10.150.0.0/16,fd70:6b76:96::/48") == ("10.150.0.0/16", "fd70:6b76:96::/48")
    assert split_cluster_cidr("10.150.0.0/16") == ("10.150.0.0/16", "")
    cluster = ClusterNetwork("10.150.0.0/16,fd70:6b76:96::/48")
    assert str(cluster.host_link_v6) == "fd70:6b76:96:ffff::/64"
    assert (cluster.host_address_v6, cluster.inner_address_v6) == ("fd70:6b76:96:ffff::1", "fd70:6b76:96:ffff::2")
    with pytest.raises(CIDRSetFull):
        free_subnet_v6("fd70:6b76:96::/62", {"fd70:6b76:96::/64", "fd70:6b76:96:1::/64", "fd70:6b76:96:2::/64"})


def test_a_cluster_keeps_its_names_and_service_range_whether_or_not_it_has_ipv6() -> None:
    single, dual = ClusterNetwork("10.150.0.0/16"), ClusterNetwork("10.150.0.0/16,fd70:6b76:96::/48")
    assert (single.netns, single.host_veth, single.nft_table) == (dual.netns, dual.host_veth, dual.nft_table)
    assert single.service_cidr == dual.service_cidr and single.host_link == dual.host_link
    assert single.host_link_v6 is None and single.ipv6_cidr == "" and not single.has_ipv6


def test_the_ipv6_pair_of_a_cluster_is_a_unique_local_slash_48_per_ipv4_slash_16() -> None:
    assert cluster_network.ipv6_cidr_for("10.150.0.0/16") == "fd70:6b76:96::/48"
    assert cluster_network.ipv6_cidr_for("10.151.0.0/16") == "fd70:6b76:97::/48"
    assert ipaddress.IPv6Network(cluster_network.ipv6_cidr_for("10.239.0.0/16")).is_private


def test_a_host_with_ipv6_disabled_gets_an_ipv4_only_cluster_and_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysctl = tmp_path / "disable_ipv6"
    monkeypatch.setattr(pod_network, "IPV6_DISABLED_SYSCTL", str(sysctl))
    sysctl.write_text("1\n")
    assert not pod_network.ipv6_enabled()
    assert cluster_network.dual_stack("10.150.0.0/16") == "10.150.0.0/16"
    # A cluster recorded dual-stack on a host whose IPv6 was disabled later: pods get IPv4 only.
    assert not ClusterNetwork("10.150.0.0/16,fd70:6b76:96::/48").has_ipv6
    node = pod_network.PodNetwork("10.150.0.0/16,fd70:6b76:96::/48", "n1", tmp_path / "node")
    node.set_pod_cidr("10.150.1.0/24,fd70:6b76:96:1::/64")
    conflist = json.loads(node.conf_file.read_text())
    assert conflist["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.150.1.0/24"}]]
    assert not cni.has_ipv6(conflist)
    sysctl.unlink()  # a kernel without IPv6 at all
    assert not pod_network.ipv6_enabled()
    sysctl.write_text("0\n")
    assert pod_network.ipv6_enabled()


def test_a_dual_stack_node_conflist_has_one_range_and_default_route_per_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pod_network, "ipv6_enabled", lambda path="": True)
    node = pod_network.PodNetwork("10.150.0.0/16,fd70:6b76:96::/48", "n1", tmp_path / "node")
    node.set_pod_cidr("10.150.1.0/24,fd70:6b76:96:1::/64")
    ipam = json.loads(node.conf_file.read_text())["plugins"][0]["ipam"]
    assert ipam["ranges"] == [[{"subnet": "10.150.1.0/24"}], [{"subnet": "fd70:6b76:96:1::/64"}]]
    assert ipam["routes"] == [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
    node_object = {"spec": {"podCIDR": "10.150.1.0/24", "podCIDRs": ["10.150.1.0/24", "fd70:6b76:96:1::/64"]}}
    assert pod_network.node_pod_cidrs(node_object) == "10.150.1.0/24,fd70:6b76:96:1::/64"
    assert pod_network.node_pod_cidrs({"spec": {"podCIDR": "10.150.1.0/24"}}) == "10.150.1.0/24"


def test_the_ipv4_pod_ip_comes_first_in_a_dual_stack_result() -> None:
    result = {
        "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/run/netns/x"}],
        "ips": [
            {"interface": 2, "address": "fd70:6b76:96:3::7/64"},
            {"interface": 2, "address": "10.150.3.7/24", "gateway": "10.150.3.1"},
        ],
    }
    assert cni.result_ips(result) == ["10.150.3.7", "fd70:6b76:96:3::7"]


def test_a_podcidr_of_another_cluster_cidr_is_told_apart_family_by_family() -> None:
    dual = "10.150.0.0/16,fd70:6b76:96::/48"
    assert not pod_network.outside_cluster("10.150.3.0/24,fd70:6b76:96:3::/64", dual)
    assert not pod_network.outside_cluster("", dual)  # none given yet
    # The cluster took 10.150.0.0/16 after its old 10.128.0.0/16 was taken while it was down.
    assert pod_network.outside_cluster("10.128.0.0/24,fd70:6b76:80::/64", dual)
    assert pod_network.outside_cluster("10.150.3.0/24,fd70:6b76:80::/64", dual)
    # A family the cluster does not have (an IPv4-only cluster) does not count against the node.
    assert not pod_network.outside_cluster("10.150.3.0/24,fd70:6b76:80::/64", "10.150.0.0/16")
