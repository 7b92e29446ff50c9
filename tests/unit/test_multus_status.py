"""status.interfaces shared by virt-handler and virt-controller: multus-status from network-status, kept across the
handler's reports; the launcher's DHCP answers only a bridge-bound guest's MAC (pure)."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from pykubevirt.api.kubevirt import multus_status, network_names
from pykubevirt.controller.multus_annotations import sync_multus_status
from pykubevirt.launcher import dhcp_server, primary_network, secondary_bridge
from pykubevirt.launcher.dhcp_server import HEADER, MAGIC, Lease

BLUE = network_names.hashed_interface("blue-net")


def vmi(interfaces: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "spec": {
            "networks": [{"name": "default", "pod": {}}, {"name": "blue-net", "multus": {"networkName": "blue"}}],
        },
        "status": {"interfaces": interfaces},
    }


def pod(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": json.dumps(list(entries))}}}


def test_the_controller_marks_secondary_interfaces_network_status_lists() -> None:
    obj = vmi([{"name": "default", "infoSource": "domain"}, {"name": "blue-net", "infoSource": "domain"}])
    sync_multus_status(obj, pod({"name": "pykubevirt", "interface": "eth0", "default": True}, {"interface": BLUE}))
    assert obj["status"]["interfaces"] == [
        {"name": "default", "infoSource": "domain"},
        {"name": "blue-net", "infoSource": "domain, multus-status", "podInterfaceName": BLUE},
    ]
    # Gone from network-status: the mark goes, the domain's part stays.
    sync_multus_status(obj, pod({"name": "pykubevirt", "interface": "eth0", "default": True}))
    assert obj["status"]["interfaces"][1]["infoSource"] == "domain"


def test_an_interface_only_multus_reports_is_listed_until_the_domain_reports_it() -> None:
    obj = vmi([{"name": "default", "infoSource": "domain"}])
    sync_multus_status(obj, pod({"interface": BLUE}))
    only_multus = {"name": "blue-net", "podInterfaceName": BLUE, "infoSource": "multus-status"}
    assert obj["status"]["interfaces"][1] == only_multus
    reported = [{"name": "default", "infoSource": "domain"}, {"name": "blue-net", "infoSource": "domain", "mac": "m"}]
    merged = multus_status.keep_controller_part(obj["status"]["interfaces"], reported)
    assert merged[1] == {
        "name": "blue-net",
        "infoSource": "domain, multus-status",
        "mac": "m",
        "podInterfaceName": BLUE,
    }
    assert multus_status.keep_controller_part(obj["status"]["interfaces"], reported[:1])[1] == only_multus


def discover(mac: str) -> bytes:
    chaddr = bytes.fromhex(mac.replace(":", "")) + b"\0" * 10
    zero = socket.inet_aton("0.0.0.0")
    header = HEADER.pack(1, 1, 6, 0, 7, 0, 0x8000, zero, zero, zero, zero, chaddr, b"", b"")
    return header + MAGIC + bytes([53, 1, dhcp_server.DISCOVER, 255])


def test_a_bridge_binding_lease_answers_only_its_guest_and_may_have_no_router() -> None:
    lease = Lease("192.168.77.5", 24, "", "169.254.75.11", 1500, client_mac="02:aa:bb:cc:dd:ee")
    assert dhcp_server.reply(discover("02:00:00:00:00:01"), lease) is None
    answer = dhcp_server.reply(discover("02:aa:bb:cc:dd:ee"), lease)
    assert answer is not None
    options = dhcp_server._options(answer[HEADER.size + 4 :])
    assert dhcp_server.OPT_ROUTER not in options
    assert options[dhcp_server.OPT_SERVER_ID] == socket.inet_aton("169.254.75.11")
    assert answer[16:20] == socket.inet_aton("192.168.77.5")
    assert struct.unpack("!H", options[dhcp_server.OPT_MTU])[0] == 1500


def test_a_multus_default_network_is_the_launchers_pod_network_interface() -> None:
    spec = {
        "networks": [{"name": "main", "multus": {"networkName": "blue", "default": True}}],
        "domain": {"devices": {"interfaces": [{"name": "main", "bridge": {}}]}},
    }
    assert primary_network.pod_network_interface({"spec": spec}) == (0, {"name": "main", "bridge": {}})
    assert secondary_bridge.bridge_interfaces({"spec": spec}) == []
