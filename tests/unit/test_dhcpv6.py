"""The launcher's IPv6 side of masquerade that needs no namespace: KubeVirt's `ip6 nat` rules, the DHCPv6 answers
and the router advertisement, built and parsed from plain bytes. Pure."""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

from pykubevirt.launcher import dhcpv6_server as v6
from pykubevirt.launcher import masquerade

CLIENT_DUID = struct.pack("!HH", 3, 1) + bytes.fromhex("525400123456")
LEASE = v6.Lease6("fd10:0:2::2", "02:00:00:00:00:00", ("fd00:10:96::a",))


def message(kind: int, *options: bytes, xid: bytes = b"\x0a\x0b\x0c") -> bytes:
    return bytes([kind]) + xid + b"".join(options)


def ia_na_request(iaid: bytes = b"\x00\x00\x00\x07") -> bytes:
    return v6.option(v6.OPT_IA_NA, iaid + struct.pack("!II", 3600, 5400))


def answer_of(packet: bytes | None) -> tuple[int, bytes, dict[int, bytes]]:
    assert packet is not None
    parsed = v6.parse_message(packet)
    assert parsed is not None
    kind, xid, options = parsed
    return kind, xid, dict(options)


def leased(ia: bytes) -> tuple[bytes, str, int, int]:
    """(IAID, address, preferred, valid) of an IA_NA answer."""
    (iaaddr,) = [value for code, value in v6.parse_options(ia[12:]) if code == v6.OPT_IAADDR]
    preferred, valid = struct.unpack("!II", iaaddr[16:24])
    return ia[:4], str(ipaddress.IPv6Address(iaaddr[:16])), preferred, valid


def test_a_solicit_gets_an_advertise_of_the_guest_address_with_kubevirts_options() -> None:
    solicit = message(v6.SOLICIT, v6.option(v6.OPT_CLIENTID, CLIENT_DUID), ia_na_request())
    kind, xid, options = answer_of(v6.reply(solicit, LEASE))
    assert kind == v6.ADVERTISE and xid == b"\x0a\x0b\x0c"
    assert options[v6.OPT_CLIENTID] == CLIENT_DUID
    # The server's DUID-LL: type 3, hardware type Ethernet, the bridge's MAC.
    assert options[v6.OPT_SERVERID] == bytes.fromhex("0003 0001 020000000000".replace(" ", ""))
    assert leased(options[v6.OPT_IA_NA]) == (b"\x00\x00\x00\x07", "fd10:0:2::2", 999 * 86400, 999 * 86400)
    assert ipaddress.IPv6Address(options[v6.OPT_DNS]) == ipaddress.IPv6Address("fd00:10:96::a")
    assert v6.OPT_RAPID_COMMIT not in options


def test_a_rapid_commit_solicit_and_any_other_client_message_get_a_reply() -> None:
    rapid = message(v6.SOLICIT, v6.option(v6.OPT_CLIENTID, CLIENT_DUID), v6.option(v6.OPT_RAPID_COMMIT, b""))
    kind, _, options = answer_of(v6.reply(rapid, LEASE))
    assert kind == v6.REPLY and v6.OPT_RAPID_COMMIT in options
    # Without an IA_NA in the request the answer still carries the address (IAID 0), as KubeVirt's modifiers do.
    assert leased(options[v6.OPT_IA_NA])[:2] == (b"\x00\x00\x00\x00", "fd10:0:2::2")
    for kind in (v6.REQUEST, v6.RENEW, v6.REBIND, v6.CONFIRM, v6.INFORMATION_REQUEST):
        answered, _, options = answer_of(v6.reply(message(kind, ia_na_request(b"\x01\x02\x03\x04")), LEASE))
        assert answered == v6.REPLY and leased(options[v6.OPT_IA_NA])[0] == b"\x01\x02\x03\x04"


def test_server_messages_relays_and_garbage_are_not_answered() -> None:
    for kind in (v6.ADVERTISE, v6.REPLY, 12, 13):  # 12/13: relay-forward/relay-reply
        assert v6.reply(message(kind), LEASE) is None
    assert v6.reply(b"\x01\x02", LEASE) is None
    # A truncated option ends the option area rather than reading past the packet.
    assert v6.parse_options(struct.pack("!HH", 1, 40) + b"short") == []
    assert v6.reply(message(v6.SOLICIT), v6.Lease6("fd10:0:2::2", "02:00:00:00:00:00")) is not None


def test_the_router_advertisement_makes_the_bridge_the_guests_default_router() -> None:
    packet = v6.router_advertisement("fd10:0:2::1/120", 1400, "02:00:00:00:00:00")
    assert packet[0] == v6.ROUTER_ADVERTISEMENT and len(packet) % 8 == 0
    fields = v6.parse_router_advertisement(packet)
    assert fields["managed"] and fields["other"] and fields["lifetime"] == v6.ROUTER_LIFETIME
    assert fields["mtu"] == 1400 and fields["mac"] == "02:00:00:00:00:00"
    # The /120 is on-link but no SLAAC prefix (that needs a /64): the address comes from DHCPv6.
    assert fields["prefixes"] == [{"prefix": "fd10:0:2::/120", "on_link": True, "autonomous": False}]
    assert v6.link_local("02:00:00:00:00:00") == "fe80::ff:fe00:0"


def test_ipv6_rules_are_kubevirts_in_the_ip6_nat_table_with_the_same_chains() -> None:
    rules = masquerade.nft_commands([], ipv6=True)
    assert rules[:7] == [
        "add table ip6 nat",
        "add chain ip6 nat prerouting { type nat hook prerouting priority -100; }",
        "add chain ip6 nat input { type nat hook input priority 100; }",
        "add chain ip6 nat output { type nat hook output priority -100; }",
        "add chain ip6 nat postrouting { type nat hook postrouting priority 100; }",
        "add chain ip6 nat KUBEVIRT_PREINBOUND",
        "add chain ip6 nat KUBEVIRT_POSTINBOUND",
    ]
    assert rules[7:] == [
        "add rule ip6 nat postrouting ip6 saddr fd10:0:2::2 counter masquerade",
        "add rule ip6 nat prerouting iifname eth0 counter jump KUBEVIRT_PREINBOUND",
        "add rule ip6 nat postrouting oifname k6t-eth0 counter jump KUBEVIRT_POSTINBOUND",
        "add rule ip6 nat KUBEVIRT_PREINBOUND counter dnat to fd10:0:2::2",
        "add rule ip6 nat KUBEVIRT_POSTINBOUND ip6 saddr { ::1 } counter snat to fd10:0:2::1",
        "add rule ip6 nat output ip6 daddr { ::1 } counter dnat to fd10:0:2::2",
    ]


def test_ports_restrict_ipv6_forwarding_the_same_as_ipv4() -> None:
    ports = [{"port": 80}, {"port": 53, "protocol": "UDP"}]
    rules = masquerade.nft_commands(ports, ipv6=True)
    assert not any(r.endswith("KUBEVIRT_PREINBOUND counter dnat to fd10:0:2::2") for r in rules)
    assert rules[-6:] == [
        "add rule ip6 nat KUBEVIRT_PREINBOUND tcp dport { 80 } counter dnat to fd10:0:2::2",
        "add rule ip6 nat KUBEVIRT_POSTINBOUND tcp dport 80 ip6 saddr { ::1 } counter snat to fd10:0:2::1",
        "add rule ip6 nat output ip6 daddr { ::1 } tcp dport 80 counter dnat to fd10:0:2::2",
        "add rule ip6 nat KUBEVIRT_PREINBOUND udp dport { 53 } counter dnat to fd10:0:2::2",
        "add rule ip6 nat KUBEVIRT_POSTINBOUND udp dport 53 ip6 saddr { ::1 } counter snat to fd10:0:2::1",
        "add rule ip6 nat output ip6 daddr { ::1 } udp dport 53 counter dnat to fd10:0:2::2",
    ]
    # The IPv4 rules are unchanged by the family switch.
    assert [r.replace("ip6", "ip").replace("fd10:0:2::", "10.0.2.").replace("::1", "127.0.0.1") for r in rules] == (
        masquerade.nft_commands(ports)
    )


def test_the_pods_ipv6_nameservers_go_to_dhcpv6_and_its_ipv4_ones_to_dhcp(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 10.96.0.10\nnameserver fd00:10:96::a\nsearch ns.svc.cluster.local cluster.local\n")
    assert masquerade.resolv_conf(str(conf)) == (["10.96.0.10"], ["ns.svc.cluster.local", "cluster.local"])
    assert masquerade.resolv_conf(str(conf), ipv6=True)[0] == ["fd00:10:96::a"]
    pod = masquerade.PodInterface("eth0", 1400, ("10.128.0.5",), "0a:58:0a:80:00:05", ("fd70:6b76:80::5",))
    assert pod.ips == ["10.128.0.5", "fd70:6b76:80::5"]
