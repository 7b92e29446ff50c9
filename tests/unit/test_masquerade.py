"""The launcher's masquerade pieces that need no namespace: KubeVirt's nft rules and the DHCP answers. Pure."""

from __future__ import annotations

import socket
import struct
from dataclasses import replace
from typing import Any

import pytest

from pykubevirt.launcher import dhcp_server, masquerade, primary_network
from pykubevirt.launcher.dhcp_server import HEADER, MAGIC, Lease

LEASE = Lease("10.0.2.2", 24, "10.0.2.1", "10.0.2.1", 1400, ("10.96.0.10",), "web", "cluster.local")
MAC = bytes.fromhex("020000aabbcc")


def request(kind: int, xid: int = 0x1234) -> bytes:
    header = HEADER.pack(1, 1, 6, 0, xid, 0, 0x8000, *(b"\0" * 4,) * 4, MAC + b"\0" * 10, b"", b"")
    return header + MAGIC + bytes([53, 1, kind, 255])


def options(packet: bytes) -> dict[int, bytes]:
    return dhcp_server._options(packet[HEADER.size + 4 :])


def test_a_discover_gets_an_offer_of_the_guest_address_with_kubevirts_options() -> None:
    answer = dhcp_server.reply(request(dhcp_server.DISCOVER), LEASE)
    assert answer is not None
    fields = HEADER.unpack_from(answer)
    assert fields[0] == 2 and fields[4] == 0x1234 and fields[11][:6] == MAC
    assert socket.inet_ntoa(fields[8]) == "10.0.2.2"
    opts = options(answer)
    assert opts[53] == bytes([dhcp_server.OFFER])
    assert socket.inet_ntoa(opts[1]) == "255.255.255.0"
    assert socket.inet_ntoa(opts[3]) == socket.inet_ntoa(opts[54]) == "10.0.2.1"
    assert struct.unpack("!I", opts[51])[0] == 999 * 24 * 3600
    assert struct.unpack("!H", opts[26])[0] == 1400
    assert socket.inet_ntoa(opts[6]) == "10.96.0.10"
    assert opts[12] == b"web" and opts[15] == b"cluster.local"


def test_a_request_is_acked_and_other_messages_are_ignored() -> None:
    ack = dhcp_server.reply(request(dhcp_server.REQUEST), LEASE)
    assert ack is not None and options(ack)[53] == bytes([dhcp_server.ACK])
    assert dhcp_server.reply(request(dhcp_server.RELEASE), LEASE) is None
    assert dhcp_server.reply(b"garbage", LEASE) is None


def test_no_ports_forwards_everything_as_kubevirt_does() -> None:
    rules = masquerade.nft_commands([])
    assert rules[:3] == [
        "add table ip nat",
        "add chain ip nat prerouting { type nat hook prerouting priority -100; }",
        "add chain ip nat input { type nat hook input priority 100; }",
    ]
    assert "add rule ip nat postrouting ip saddr 10.0.2.2 counter masquerade" in rules
    assert rules[-3:] == [
        "add rule ip nat KUBEVIRT_PREINBOUND counter dnat to 10.0.2.2",
        "add rule ip nat KUBEVIRT_POSTINBOUND ip saddr { 127.0.0.1 } counter snat to 10.0.2.1",
        "add rule ip nat output ip daddr { 127.0.0.1 } counter dnat to 10.0.2.2",
    ]


def test_ports_restrict_the_dnat_to_the_listed_ports() -> None:
    rules = masquerade.nft_commands([{"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}])
    assert rules[-6:] == [
        "add rule ip nat KUBEVIRT_PREINBOUND tcp dport { 80 } counter dnat to 10.0.2.2",
        "add rule ip nat KUBEVIRT_POSTINBOUND tcp dport 80 ip saddr { 127.0.0.1 } counter snat to 10.0.2.1",
        "add rule ip nat output ip daddr { 127.0.0.1 } tcp dport 80 counter dnat to 10.0.2.2",
        "add rule ip nat KUBEVIRT_PREINBOUND udp dport { 53 } counter dnat to 10.0.2.2",
        "add rule ip nat KUBEVIRT_POSTINBOUND udp dport 53 ip saddr { 127.0.0.1 } counter snat to 10.0.2.1",
        "add rule ip nat output ip daddr { 127.0.0.1 } udp dport 53 counter dnat to 10.0.2.2",
    ]


def test_the_pod_network_interface_and_its_binding_are_what_the_launcher_plumbs() -> None:
    vmi: dict[str, Any] = {
        "spec": {
            "domain": {
                "devices": {
                    "interfaces": [
                        {"name": "blue", "bridge": {}},
                        {"name": "gone", "masquerade": {}, "state": "absent"},
                        {"name": "default", "masquerade": {}},
                    ]
                }
            },
            "networks": [
                {"name": "blue", "multus": {"networkName": "blue"}},
                {"name": "gone", "pod": {}},
                {"name": "default", "pod": {}},
            ],
        }
    }
    found = primary_network.pod_network_interface(vmi)
    assert found == (2, {"name": "default", "masquerade": {}})
    assert primary_network.binding_of(found[1]) == "masquerade"
    assert primary_network.binding_of({"name": "x", "bridge": {}}) == "bridge"
    vmi["spec"]["networks"] = [{"name": "blue", "multus": {"networkName": "blue"}}]
    assert primary_network.pod_network_interface(vmi) is None


def test_dhcp_options_of_the_interface_and_the_pods_search_domains_reach_the_guest() -> None:
    extra = dhcp_server.interface_options(
        {
            "bootFileName": "pxelinux.0",
            "tftpServerName": "tftp.example",
            "ntpServers": ["10.0.0.5", "10.0.0.6"],
            "privateOptions": [{"option": 240, "value": "extra"}],
        }
    )
    assert extra == (
        (67, b"pxelinux.0"),
        (66, b"tftp.example"),
        (42, bytes([10, 0, 0, 5, 10, 0, 0, 6])),
        (240, b"extra"),
    )
    search = ("default.svc.cluster.local", "cluster.local")
    answer = dhcp_server.reply(request(dhcp_server.DISCOVER), replace(LEASE, search=search, extra=extra))
    assert answer is not None
    opts = options(answer)
    assert opts[119] == b"\x07default\x03svc\x07cluster\x05local\x00\x07cluster\x05local\x00"
    assert opts[66] == b"tftp.example" and opts[67] == b"pxelinux.0" and opts[240] == b"extra"


def test_an_ntp_server_that_is_not_ipv4_is_kubevirts_error() -> None:
    with pytest.raises(ValueError, match=r"^Could not parse NTP server as IPv4 address: fd00::1$"):
        dhcp_server.interface_options({"ntpServers": ["fd00::1"]})
