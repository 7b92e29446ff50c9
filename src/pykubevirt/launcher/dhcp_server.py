"""The launcher's DHCP server for one guest interface, as KubeVirt's virt-launcher runs (`pkg/network/dhcp`): it
listens on UDP 67 of the in-pod bridge and answers with one fixed lease: any client for masquerade, only the guest's
MAC for bridge (whose bridge also carries the pod network's other DHCP traffic), and never ends."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.launcher.datagram_responder import respond_on

log = logging.getLogger("pykubevirt.launcher.dhcp")

SERVER_PORT = 67
CLIENT_PORT = 68
MAGIC = b"\x63\x82\x53\x63"
DISCOVER, OFFER, REQUEST, DECLINE, ACK, NAK, RELEASE, INFORM = 1, 2, 3, 4, 5, 6, 7, 8
# KubeVirt's lease: 999 days ("infinite" for a guest whose address never changes).
LEASE_SECONDS = 999 * 24 * 3600
OPT_SUBNET, OPT_ROUTER, OPT_DNS, OPT_HOSTNAME, OPT_DOMAIN, OPT_MTU = 1, 3, 6, 12, 15, 26
OPT_LEASE, OPT_MESSAGE_TYPE, OPT_SERVER_ID, OPT_CLASSLESS_ROUTES, OPT_END = 51, 53, 54, 121, 255
OPT_NTP, OPT_TFTP_SERVER, OPT_BOOT_FILE, OPT_DOMAIN_SEARCH = 42, 66, 67, 119
HEADER = struct.Struct("!BBBBIHH4s4s4s4s16s64s128s")


@dataclass(frozen=True, slots=True)
class Lease:
    """What the guest is given."""

    address: str
    prefix: int
    router: str
    server_id: str
    mtu: int
    dns: Sequence[str] = field(default_factory=tuple)
    hostname: str = ""
    domain: str = ""
    # Bridge binding: only this client hardware address is answered ("" answers anyone).
    client_mac: str = ""
    # RFC 3442 classless static routes (destination CIDR, next hop), the default route last as KubeVirt sends them.
    routes: Sequence[tuple[str, str]] = field(default_factory=tuple)
    # The pod's search domains (option 119), and the interface's `dhcpOptions` as (code, value) options.
    search: Sequence[str] = field(default_factory=tuple)
    extra: Sequence[tuple[int, bytes]] = field(default_factory=tuple)


def _option(code: int, value: bytes) -> bytes:
    return bytes([code, len(value)]) + value


def classless_routes(routes: Sequence[tuple[str, str]]) -> bytes:
    """Option 121's value: per route the prefix length, the destination's significant octets, then the router."""
    value = b""
    for destination, router in routes:
        network = ipaddress.IPv4Network(destination, strict=False)
        octets = (network.prefixlen + 7) // 8
        value += bytes([network.prefixlen]) + network.network_address.packed[:octets] + socket.inet_aton(router)
    return value


def domain_search(domains: Sequence[str]) -> bytes:
    """Option 119's value (RFC 3397): each domain as DNS labels ending in the root label, uncompressed."""
    value = b""
    for domain in domains:
        labels = [label.encode() for label in domain.strip(".").split(".") if label]
        value += b"".join(bytes([len(label)]) + label for label in labels) + b"\0"
    return value


def interface_options(dhcp_options: Mapping[str, Any]) -> tuple[tuple[int, bytes], ...]:
    """An interface's `dhcpOptions` as DHCP options, as KubeVirt's launcher sends them: boot file name (67), TFTP
    server name (66), NTP servers (42, IPv4 only) and private options (224-254, the value's bytes)."""
    options: list[tuple[int, bytes]] = []
    if dhcp_options.get("bootFileName"):
        options.append((OPT_BOOT_FILE, str(dhcp_options["bootFileName"]).encode()))
    if dhcp_options.get("tftpServerName"):
        options.append((OPT_TFTP_SERVER, str(dhcp_options["tftpServerName"]).encode()))
    ntp = b""
    for server in dhcp_options.get("ntpServers") or []:
        try:
            ntp += ipaddress.IPv4Address(str(server)).packed
        except ValueError:
            raise ValueError(f"Could not parse NTP server as IPv4 address: {server}") from None
    if ntp:
        options.append((OPT_NTP, ntp))
    for private in dhcp_options.get("privateOptions") or []:
        options.append((int(private["option"]), str(private.get("value") or "").encode()))
    return tuple(options)


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", "").replace("-", ""))


def _options(data: bytes) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    index = 0
    while index < len(data):
        code = data[index]
        if code == OPT_END:
            break
        if code == 0:
            index += 1
            continue
        if index + 1 >= len(data):
            break
        length = data[index + 1]
        found[code] = data[index + 2 : index + 2 + length]
        index += 2 + length
    return found


def reply(request: bytes, lease: Lease) -> bytes | None:
    """The OFFER for a DISCOVER, the ACK for a REQUEST, None for anything else (or a malformed packet)."""
    if len(request) < HEADER.size + 4 or request[0] != 1 or request[HEADER.size : HEADER.size + 4] != MAGIC:
        return None
    _op, htype, hlen, _hops, xid, _secs, flags, _ci, _yi, _si, giaddr, chaddr, _sname, _file = HEADER.unpack_from(
        request
    )
    kind = _options(request[HEADER.size + 4 :]).get(OPT_MESSAGE_TYPE, b"\0")[0]
    if kind not in (DISCOVER, REQUEST):
        return None
    if lease.client_mac and chaddr[:hlen] != _mac_bytes(lease.client_mac):
        return None
    answer = OFFER if kind == DISCOVER else ACK
    mask = ipaddress.IPv4Network(f"0.0.0.0/{lease.prefix}").netmask.packed
    header = HEADER.pack(
        2, htype, hlen, 0, xid, 0, flags, b"\0" * 4,
        socket.inet_aton(lease.address), socket.inet_aton(lease.server_id), giaddr, chaddr, b"", b"",
    )  # fmt: skip
    options = [
        _option(OPT_MESSAGE_TYPE, bytes([answer])),
        _option(OPT_SERVER_ID, socket.inet_aton(lease.server_id)),
        _option(OPT_LEASE, struct.pack("!I", LEASE_SECONDS)),
        _option(OPT_SUBNET, mask),
        _option(OPT_MTU, struct.pack("!H", lease.mtu)),
    ]
    if lease.router:  # none: the guest gets no default route through this interface
        options.append(_option(OPT_ROUTER, socket.inet_aton(lease.router)))
    if lease.dns:
        options.append(_option(OPT_DNS, b"".join(socket.inet_aton(d) for d in lease.dns)))
    if lease.hostname:
        options.append(_option(OPT_HOSTNAME, lease.hostname.encode()[:63]))
    if lease.domain:
        options.append(_option(OPT_DOMAIN, lease.domain.encode()[:255]))
    if lease.routes:
        options.append(_option(OPT_CLASSLESS_ROUTES, classless_routes(lease.routes)))
    if lease.search:
        options.append(_option(OPT_DOMAIN_SEARCH, domain_search(lease.search)[:255]))
    # One option holds at most 255 bytes; longer values would need RFC 3396 splitting, which no guest here needs.
    options += [_option(code, value[:255]) for code, value in lease.extra]
    return header + MAGIC + b"".join(options) + bytes([OPT_END])


async def serve(device: str, lease: Lease) -> asyncio.DatagramTransport:
    """Answer DHCP on `device` until the transport is closed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode() + b"\0")
    sock.bind(("0.0.0.0", SERVER_PORT))

    def answered(answer: bytes) -> None:
        log.info("DHCP %s: %s to the guest", "offered" if answer[HEADER.size + 6] == OFFER else "acked", lease.address)

    # The client has no address yet: the answer is broadcast on the bridge the socket is bound to.
    transport = await respond_on(
        sock, lambda request: reply(request, lease), answered, destination=("255.255.255.255", CLIENT_PORT)
    )
    log.info("DHCP server on %s: %s/%d via %s", device, lease.address, lease.prefix, lease.router)
    return transport
