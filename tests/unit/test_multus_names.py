"""KubeVirt's pod interface names and virt-controller's Multus annotations; the NAD API's parsing (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import network_attachment as nad
from pykubevirt.api.crd import crd_manifest
from pykubevirt.api.kubevirt import network_names
from pykubevirt.controller.multus_annotations import multus_annotations
from pykubevirt.node import multus


def vmi(networks: list[dict[str, Any]], interfaces: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "vm", "namespace": "ns1"},
        "spec": {"networks": networks, "domain": {"devices": {"interfaces": interfaces}}},
    }


def test_hashed_names_follow_kubevirts_namescheme() -> None:
    # KubeVirt's own example: network "blue-net" → pod0371e81cb4a.
    assert network_names.hashed_interface("blue-net") == "pod0371e81cb4a"
    assert network_names.tap_name("pod0371e81cb4a") == "tap0371e81cb4a"
    assert network_names.bridge_name("pod0371e81cb4a") == "k6t-0371e81cb4a"
    assert network_names.nic_name("pod0371e81cb4a") == "0371e81cb4a-nic"
    assert (network_names.bridge_name("eth0"), network_names.tap_name("eth0")) == ("k6t-eth0", "tap0")
    networks = [{"name": "default", "pod": {}}, {"name": "blue-net", "multus": {"networkName": "blue"}}]
    assert network_names.pod_interfaces(networks) == {"default": "eth0", "blue-net": "pod0371e81cb4a"}


def test_controller_writes_the_networks_annotation_as_kubevirt_does() -> None:
    networks = [
        {"name": "default", "pod": {}},
        {"name": "blue-net", "multus": {"networkName": "blue"}},
        {"name": "red", "multus": {"networkName": "other/red"}},
        {"name": "gone", "multus": {"networkName": "gone"}},
    ]
    interfaces = [
        {"name": "default", "masquerade": {}},
        {"name": "blue-net", "bridge": {}, "macAddress": "02:00:00:00:00:0b"},
        {"name": "red", "bridge": {}},
        {"name": "gone", "bridge": {}, "state": "absent"},
    ]
    annotations = multus_annotations(vmi(networks, interfaces))
    assert annotations == {
        nad.NETWORKS_ANNOTATION: '[{"name":"blue","namespace":"ns1","mac":"02:00:00:00:00:0b",'
        '"interface":"pod0371e81cb4a"},{"name":"red","namespace":"other","interface":"'
        + network_names.hashed_interface("red")
        + '"}]'
    }


def test_a_multus_default_network_replaces_the_pod_network_by_annotation() -> None:
    networks = [{"name": "main", "multus": {"networkName": "ns1/blue", "default": True}}]
    annotations = multus_annotations(vmi(networks, [{"name": "main", "bridge": {}}]))
    assert annotations == {nad.DEFAULT_NETWORK_ANNOTATION: "ns1/blue"}
    assert multus_annotations(vmi([{"name": "default", "pod": {}}], [{"name": "default", "masquerade": {}}])) == {}


def test_network_selections_parse_json_and_the_short_form() -> None:
    parsed = nad.parse_selections('[{"name":"blue","interface":"pod1"},{"name":"red","namespace":"x"}]', "ns")
    assert [(s.key, s.interface) for s in parsed] == [("ns/blue", "pod1"), ("x/red", "")]
    assert [(s.key, s.interface) for s in nad.parse_selections("blue, x/red@eth9", "ns")] == [
        ("ns/blue", ""),
        ("x/red", "eth9"),
    ]
    assert multus.interface_names(parsed) == ["pod1", "net2"]
    with pytest.raises(nad.SelectionError):
        nad.parse_selections('[{"interface":"x"}]', "ns")


def test_a_single_plugin_config_becomes_a_list_with_host_local_kept_under_the_node(tmp_path: Path) -> None:
    config = {"cniVersion": "0.3.1", "name": "blue", "type": "bridge", "bridge": "br1", "ipam": {"type": "host-local"}}
    definition = {"metadata": {"name": "blue", "namespace": "ns"}, "spec": {"config": json.dumps(config)}}
    conflist = multus.delegate_conflist(definition, tmp_path)
    assert conflist == {
        "cniVersion": "0.3.1",
        "name": "blue",
        "plugins": [
            {"type": "bridge", "bridge": "br1", "ipam": {"type": "host-local", "dataDir": str(tmp_path)}},
        ],
    }
    with pytest.raises(multus.DelegateError):
        multus.delegate_conflist({"metadata": {}, "spec": {"config": "{"}}, tmp_path)


def test_a_cni_result_becomes_a_network_status_entry() -> None:
    result = {
        "interfaces": [
            {"name": "br1", "mac": "aa:aa:aa:aa:aa:aa"},
            {"name": "veth1", "mac": "bb:bb:bb:bb:bb:bb"},
            {"name": "pod1", "mac": "cc:cc:cc:cc:cc:cc", "sandbox": "/run/netns/x"},
        ],
        "ips": [{"interface": 2, "address": "10.1.1.5/24", "gateway": "10.1.1.1"}],
    }
    attachment = multus.attachment_of(result, "ns/blue", "pod1")
    assert attachment.status() == {
        "name": "ns/blue",
        "interface": "pod1",
        "ips": ["10.1.1.5"],
        "mac": "cc:cc:cc:cc:cc:cc",
        "dns": {},
        "gateway": ["10.1.1.1"],
    }
    assert attachment.status(default=True)["default"] is True


def test_the_nad_crd_is_multus_own() -> None:
    crd = crd_manifest(nad.NETWORK_ATTACHMENT_DEFINITION)
    assert crd["metadata"]["name"] == "network-attachment-definitions.k8s.cni.cncf.io"
    assert crd["spec"]["names"]["shortNames"] == ["net-attach-def"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1" and "subresources" not in version
    assert version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["config"]["type"] == "string"
