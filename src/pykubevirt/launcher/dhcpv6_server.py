"""The launcher's IPv6 servers for a masquerade guest, beside the IPv4 DHCP server (`dhcp_server.py`).

DHCPv6 as KubeVirt's virt-launcher runs it (`pkg/network/dhcp/serverv6`): UDP 547 on the in-pod bridge (joined to
All_DHCP_Relay_Agents_and_Servers, ff02::1:2), a single client, any request answered with one IA_NA holding the guest
address (fd10:0:2::2) with 999-day lifetimes, the server's DUID-LL from the bridge MAC, and the pod's IPv6 name
servers. A Solicit is answered with an Advertise (a Reply when it asks for rapid commit), anything else with a Reply.

DHCPv6 carries no route, so the guest learns its default router from router advertisements: the launcher sends
them on the bridge (to all nodes, ff02::1, periodically and in answer to a router solicitation) with the Managed
flag (take the address from DHCPv6), the pod MTU and the guest subnet as an on-link prefix that is not for SLAAC
(it is a /120). A guest that configures its address another way (KubeVirt's docs use cloud-init) still gets its
default route from them.

The packet builders and parsers are pure functions of bytes; `serve` and `advertise` do the socket work.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from pykubevirt.launcher.datagram_responder import respond_on

log = logging.getLogger("pykubevirt.launcher.dhcpv6")

SERVER_PORT = 547
CLIENT_PORT = 546
ALL_SERVERS = "ff02::1:2"
ALL_NODES = "ff02::1"
# Message types (RFC 8415).
SOLICIT, ADVERTISE, REQUEST, CONFIRM, RENEW, REBIND, REPLY, RELEASE, DECLINE = 1, 2, 3, 4, 5, 6, 7, 8, 9
INFORMATION_REQUEST = 11
# Options.
OPT_CLIENTID, OPT_SERVERID, OPT_IA_NA, OPT_IAADDR, OPT_RAPID_COMMIT, OPT_DNS = 1, 2, 3, 5, 14, 23
# KubeVirt's "infinite" lease: 999 days.
LEASE_SECONDS = 999 * 24 * 3600
DUID_LL, HWTYPE_ETHERNET = 3, 1

# ICMPv6 router discovery (RFC 4861).
ROUTER_SOLICITATION, ROUTER_ADVERTISEMENT = 133, 134
RA_MANAGED, RA_OTHER = 0x80, 0x40
ND_OPT_SOURCE_LLADDR, ND_OPT_PREFIX_INFO, ND_OPT_MTU = 1, 3, 5
PREFIX_ON_LINK, PREFIX_AUTONOMOUS = 0x80, 0x40
ROUTER_LIFETIME = 1800
# Unsolicited advertisements: often while the guest boots, then at this interval (well inside the lifetime).
RA_INTERVAL_SECONDS = 60.0
RA_STARTUP_INTERVAL_SECONDS = 3.0
RA_STARTUP_COUNT = 10


@dataclass(frozen=True, slots=True)
class Lease6:
    """What the guest is given over DHCPv6."""

    address: str
    server_mac: str
    dns: Sequence[str] = field(default_factory=tuple)


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", "").replace("-", ""))


def server_duid(mac: str) -> bytes:
    """DUID-LL (type 3) of an Ethernet address."""
    return struct.pack("!HH", DUID_LL, HWTYPE_ETHERNET) + _mac_bytes(mac)


def option(code: int, value: bytes) -> bytes:
    return struct.pack("!HH", code, len(value)) + value


def parse_options(data: bytes) -> list[tuple[int, bytes]]:
    """A DHCPv6 option area as (code, value) pairs, in order; a truncated option ends it."""
    found: list[tuple[int, bytes]] = []
    index = 0
    while index + 4 <= len(data):
        code, length = struct.unpack_from("!HH", data, index)
        if index + 4 + length > len(data):
            break
        found.append((code, data[index + 4 : index + 4 + length]))
        index += 4 + length
    return found


def parse_message(data: bytes) -> tuple[int, bytes, list[tuple[int, bytes]]] | None:
    """(message type, transaction id, options) of a client message; None for a malformed one."""
    if len(data) < 4:
        return None
    return data[0], data[1:4], parse_options(data[4:])


def ia_na(iaid: bytes, address: str) -> bytes:
    """An IA_NA (T1 = T2 = 0: the client chooses) holding one address with infinite-as-KubeVirt lifetimes."""
    iaaddr = option(
        OPT_IAADDR, ipaddress.IPv6Address(address).packed + struct.pack("!II", LEASE_SECONDS, LEASE_SECONDS)
    )
    return option(OPT_IA_NA, iaid + struct.pack("!II", 0, 0) + iaaddr)


def reply(request: bytes, lease: Lease6) -> bytes | None:
    """The answer to a client message: Advertise for a Solicit (Reply with rapid commit when it asks), Reply for any
    other client message; None for server-to-client or relay messages and malformed packets."""
    parsed = parse_message(request)
    if parsed is None:
        return None
    kind, xid, options = parsed
    if kind not in (SOLICIT, REQUEST, CONFIRM, RENEW, REBIND, RELEASE, DECLINE, INFORMATION_REQUEST):
        return None
    codes = dict(options)
    rapid = kind == SOLICIT and OPT_RAPID_COMMIT in codes
    answer = ADVERTISE if kind == SOLICIT and not rapid else REPLY
    out = bytes([answer]) + xid
    if OPT_CLIENTID in codes:
        out += option(OPT_CLIENTID, codes[OPT_CLIENTID])
    out += option(OPT_SERVERID, server_duid(lease.server_mac))
    if rapid:
        out += option(OPT_RAPID_COMMIT, b"")
    # The IA the client asked for keeps its IAID; a client that asked for none is offered one with IAID 0, as
    # KubeVirt's server (its modifiers always add the IA_NA).
    requested = codes.get(OPT_IA_NA)
    out += ia_na(requested[:4] if requested and len(requested) >= 4 else b"\0\0\0\0", lease.address)
    if lease.dns:
        out += option(OPT_DNS, b"".join(ipaddress.IPv6Address(d).packed for d in lease.dns))
    return out


def link_local(mac: str) -> str:
    """The EUI-64 link-local address the kernel gives an interface with this MAC."""
    octets = bytearray(_mac_bytes(mac))
    octets[0] ^= 0x02
    eui = bytes(octets[:3]) + b"\xff\xfe" + bytes(octets[3:])
    return str(ipaddress.IPv6Address(b"\xfe\x80" + b"\0" * 6 + eui))


def router_advertisement(prefix: str, mtu: int, mac: str, *, lifetime: int = ROUTER_LIFETIME) -> bytes:
    """An ICMPv6 router advertisement (checksum zero: the kernel fills it for a raw ICMPv6 socket): Managed (and
    Other) configuration by DHCPv6, this router as default for `lifetime` seconds, the guest subnet on-link but not
    for address autoconfiguration, the MTU and the router's link-layer address."""
    network = ipaddress.IPv6Network(prefix, strict=False)
    header = struct.pack("!BBHBBHII", ROUTER_ADVERTISEMENT, 0, 0, 64, RA_MANAGED | RA_OTHER, lifetime, 0, 0)
    source = struct.pack("!BB", ND_OPT_SOURCE_LLADDR, 1) + _mac_bytes(mac)
    prefix_info = struct.pack(
        "!BBBBIII16s",
        ND_OPT_PREFIX_INFO, 4, network.prefixlen, PREFIX_ON_LINK,
        0xFFFFFFFF, 0xFFFFFFFF, 0, network.network_address.packed,
    )  # fmt: skip
    mtu_option = struct.pack("!BBHI", ND_OPT_MTU, 1, 0, mtu)
    return header + source + prefix_info + mtu_option


def parse_router_advertisement(data: bytes) -> dict[str, object]:
    """The fields of a router advertisement (for tests and logs): flags, lifetime, prefixes, MTU, source MAC."""
    if len(data) < 16 or data[0] != ROUTER_ADVERTISEMENT:
        raise ValueError("not a router advertisement")
    _type, _code, _sum, hop_limit, flags, lifetime, _reachable, _retrans = struct.unpack_from("!BBHBBHII", data)
    found: dict[str, object] = {
        "hop_limit": hop_limit,
        "managed": bool(flags & RA_MANAGED),
        "other": bool(flags & RA_OTHER),
        "lifetime": lifetime,
        "prefixes": [],
    }
    index = 16
    while index + 2 <= len(data):
        kind, units = data[index], data[index + 1]
        if units == 0:
            raise ValueError("option of length 0")
        body = data[index : index + units * 8]
        if kind == ND_OPT_SOURCE_LLADDR:
            found["mac"] = body[2:8].hex(":")
        elif kind == ND_OPT_MTU:
            found["mtu"] = struct.unpack_from("!I", body, 4)[0]
        elif kind == ND_OPT_PREFIX_INFO:
            length, pflags = body[2], body[3]
            address = ipaddress.IPv6Address(body[16:32])
            cast(list[dict[str, object]], found["prefixes"]).append(
                {
                    "prefix": f"{address}/{length}",
                    "on_link": bool(pflags & PREFIX_ON_LINK),
                    "autonomous": bool(pflags & PREFIX_AUTONOMOUS),
                }
            )
        index += units * 8
    return found


async def serve(device: str, lease: Lease6) -> asyncio.DatagramTransport:
    """Answer DHCPv6 on `device` until the transport is closed."""
    index = socket.if_nametoindex(device)
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode() + b"\0")
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(("::", SERVER_PORT))
        group = socket.inet_pton(socket.AF_INET6, ALL_SERVERS) + struct.pack("@I", index)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, group)
    except OSError:
        sock.close()
        raise

    def answered(answer: bytes) -> None:
        log.info("DHCPv6 %s: %s to the guest", "advertised" if answer[0] == ADVERTISE else "replied", lease.address)

    # To the client's own (link-local) address and port, on the interface it came from.
    transport = await respond_on(sock, lambda request: reply(request, lease), answered)
    log.info("DHCPv6 server on %s: %s", device, lease.address)
    return transport


class RouterAdvertiser:
    """Router advertisements on one device: unsolicited (often at first, then every RA_INTERVAL_SECONDS) and in
    answer to each router solicitation. A send that fails (the bridge has no link-local address until the guest's
    tap gives it a carrier) is retried at the next tick."""

    def __init__(self, device: str, packet: bytes) -> None:
        self.device = device
        self.packet = packet
        self.index = socket.if_nametoindex(device)
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode() + b"\0")
            # Neighbour discovery packets must arrive with hop limit 255 (RFC 4861 6.1.2).
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, self.index)
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise
        self.task: asyncio.Task[None] | None = None
        self.sent = 0

    def send(self) -> bool:
        try:
            self.sock.sendto(self.packet, (ALL_NODES, 0, 0, self.index))
        except OSError:
            return False
        self.sent += 1
        return True

    def _readable(self) -> None:
        while True:
            try:
                data = self.sock.recv(1500)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if data and data[0] == ROUTER_SOLICITATION:
                self.send()

    async def _run(self) -> None:
        ticks = 0
        while True:
            self.send()
            ticks += 1
            await asyncio.sleep(RA_STARTUP_INTERVAL_SECONDS if ticks < RA_STARTUP_COUNT else RA_INTERVAL_SECONDS)

    def start(self) -> None:
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._readable)
        self.task = asyncio.create_task(self._run(), name=f"router-advertisements-{self.device}")

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


async def advertise(device: str, prefix: str, mtu: int, mac: str) -> RouterAdvertiser:
    """Start router advertisements on `device` (close() stops them)."""
    advertiser = RouterAdvertiser(device, router_advertisement(prefix, mtu, mac))
    advertiser.start()
    log.info("router advertisements on %s: %s on-link, DHCPv6-managed", device, prefix)
    return advertiser
