"""The bridge binding's pure parts: reading the pod interface, the routes and lease the guest gets, the `ip` lines,
and the DHCP server answering only the guest's MAC."""

from __future__ import annotations

import json

from pykubevirt.launcher import bridge_binding, dhcp_server
from pykubevirt.launcher.bridge_binding import PodLink
from pykubevirt.launcher.dhcp_server import HEADER, MAGIC, Lease

ADDR = json.dumps(
    [
        {
            "ifindex": 3, "ifname": "eth0", "mtu": 1400, "address": "0a:58:0a:f4:00:05",
            "addr_info": [
                {"family": "inet", "local": "10.244.0.5", "prefixlen": 24, "scope": "global"},
                {"family": "inet6", "local": "fd00:244::5", "prefixlen": 64, "scope": "global"},
                {"family": "inet6", "local": "fe80::858:aff:fef4:5", "prefixlen": 64, "scope": "link"},
            ],
        }
    ]
)  # fmt: skip
ROUTES = json.dumps(
    [
        {"dst": "default", "gateway": "10.244.0.1", "dev": "eth0"},
        {"dst": "10.244.0.0/24", "dev": "eth0", "protocol": "kernel", "scope": "link"},
        {"dst": "10.96.0.0/12", "gateway": "10.244.0.1", "dev": "eth0"},
    ]
)
LINK = bridge_binding.parse_link(ADDR, ROUTES)


def test_the_pod_interface_is_read_with_global_addresses_and_its_routes() -> None:
    assert LINK == PodLink(
        "eth0", "0a:58:0a:f4:00:05", 1400, ("10.244.0.5/24",), ("fd00:244::5/64",),
        (("0.0.0.0/0", "10.244.0.1"), ("10.244.0.0/24", ""), ("10.96.0.0/12", "10.244.0.1")),
    )  # fmt: skip
    assert LINK.ips == ["10.244.0.5", "fd00:244::5"]
    assert LINK.gateway == "10.244.0.1"
    assert bridge_binding.parse_link("[]", "[]") is None


def test_the_guest_gets_the_non_local_routes_with_the_default_last() -> None:
    assert LINK is not None
    assert bridge_binding.dhcp_routes(LINK) == (("10.96.0.0/12", "10.244.0.1"), ("0.0.0.0/0", "10.244.0.1"))


def test_the_guest_mac_is_the_spec_s_else_the_pod_s() -> None:
    assert LINK is not None
    assert bridge_binding.guest_mac(LINK, {"name": "default"}) == "0a:58:0a:f4:00:05"
    assert bridge_binding.guest_mac(LINK, {"macAddress": "02:AA:00:00:00:01"}) == "02:aa:00:00:00:01"


def test_kubevirt_names_and_ip_lines() -> None:
    assert LINK is not None
    assert bridge_binding.bridge_name("eth0") == "k6t-eth0"
    assert bridge_binding.bridge_name("pod0371e81cb4a") == "k6t-0371e81cb4a"
    assert bridge_binding.renamed_pod_iface("eth0") == "eth0-nic"
    lines = bridge_binding.ip_batch(LINK, "02:11:22:33:44:55", 0)
    assert lines[:2] == [
        "link add k6t-eth0 address 02:11:22:33:44:55 type bridge",
        "addr add 169.254.75.10/32 dev k6t-eth0",
    ]
    assert lines.index("link set eth0 name eth0-nic") < lines.index(
        "link set eth0-nic address 02:11:22:33:44:55 master k6t-eth0"
    )
    assert "link set dev eth0-nic type bridge_slave learning off" in lines
    assert lines[-1] == "link set tap0 mtu 1400 master k6t-eth0 up"
    assert bridge_binding.holder_batch(LINK, "dummy") == [
        "link add eth0 type dummy",
        "link set eth0 address 0a:58:0a:f4:00:05 mtu 1400",
        "addr add 10.244.0.5/24 dev eth0",
        "addr add fd00:244::5/64 dev eth0 nodad",
    ]


def discover_from(mac: bytes) -> bytes:
    header = HEADER.pack(1, 1, 6, 0, 7, 0, 0x8000, *(b"\0" * 4,) * 4, mac + b"\0" * 10, b"", b"")
    return header + MAGIC + bytes([53, 1, dhcp_server.DISCOVER, 255])


def test_the_bridge_lease_answers_only_the_guest_mac_and_carries_classless_routes() -> None:
    lease = Lease(
        "10.244.0.5", 24, "10.244.0.1", "169.254.75.10", 1400,
        client_mac="0a:58:0a:f4:00:05", routes=(("10.96.0.0/12", "10.244.0.1"), ("0.0.0.0/0", "10.244.0.1")),
    )  # fmt: skip
    assert dhcp_server.reply(discover_from(bytes.fromhex("0a580af40006")), lease) is None
    offer = dhcp_server.reply(discover_from(bytes.fromhex("0a580af40005")), lease)
    assert offer is not None
    routes = dhcp_server._options(offer[HEADER.size + 4 :])[dhcp_server.OPT_CLASSLESS_ROUTES]
    # 12-bit prefix: two significant octets; the default route: none.
    assert routes == bytes([12, 10, 96, 10, 244, 0, 1, 0, 10, 244, 0, 1])


def test_a_random_bridge_mac_is_unicast_and_locally_administered() -> None:
    first = int(bridge_binding.random_mac().split(":")[0], 16)
    assert first & 0x01 == 0 and first & 0x02 == 0x02
