"""The `bridge` binding on the pod network inside the launcher's pod namespace, as KubeVirt plumbs it
(`pkg/network/setup/netpod` `bridgeBindingSpec`, `discoverbridge.go`): the pod's address moves to the guest.

The pod interface `eth0` is renamed `eth0-nic`, loses its addresses, takes the bridge's MAC and becomes a port of
`k6t-eth0` (learning off) next to the guest's tap `tap0`; a dummy `eth0`, left down (an empty bridge where the kernel
has no dummy driver), keeps the original MAC and addresses for anything in the pod that reads them; `arp_ignore=1`
leaves ARP for the pod IP to the guest. The launcher's DHCP server then gives the guest the pod's IP, prefix,
gateway and routes for the pod's MAC only.

What the pod looked like before is cached in a file, so a restarted launcher serves the same lease after the move.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pykubevirt.api.kubevirt import network_names
from pykubevirt.launcher import dhcp_server
from pykubevirt.launcher.masquerade import PlumbingError, lease_names, link_exists, resolv_conf, run_checked

log = logging.getLogger("pykubevirt.launcher.bridge")

POD_IFACE = "eth0"
TAP = "tap0"
# KubeVirt's fake bridge address (`169.254.75.1` + the interface's index, /32): the DHCP server's identity.
FAKE_BRIDGE_IP_BASE = "169.254.75.1"
SIOCETHTOOL = 0x8946
ETHTOOL_STXCSUM = 0x00000017


def bridge_name(pod_iface: str) -> str:
    """`k6t-` + the pod interface name without its `pod` prefix (KubeVirt's `GenerateBridgeName`)."""
    return network_names.bridge_name(pod_iface)


def renamed_pod_iface(pod_iface: str) -> str:
    """The name the pod interface takes once it is a bridge port (KubeVirt's `GenerateNewBridgedVmiInterfaceName`:
    `eth0-nic`, or `<hash>-nic` for a secondary network's `pod<hash>`)."""
    return network_names.nic_name(pod_iface)


@dataclass(frozen=True, slots=True)
class PodLink:
    """The pod interface as CNI left it: what the guest takes over."""

    name: str
    mac: str
    mtu: int
    # "address/prefix" of each family, global unicast only.
    ipv4: tuple[str, ...]
    ipv6: tuple[str, ...]
    # IPv4 routes through the interface as (destination CIDR, next hop), in the kernel's order.
    routes: tuple[tuple[str, str], ...]

    @property
    def ips(self) -> list[str]:
        """The addresses without prefixes, IPv4 first (what status reports)."""
        return [a.split("/", 1)[0] for a in (*self.ipv4, *self.ipv6)]

    @property
    def gateway(self) -> str:
        """The next hop of the first IPv4 route with one (KubeVirt: the first route's next hop)."""
        return next((hop for _, hop in self.routes if hop), "")


def parse_link(addr_json: str, route_json: str) -> PodLink | None:
    """A PodLink from `ip -j addr show dev X` and `ip -j -4 route show dev X` output; None without the device."""
    entries: list[dict[str, Any]] = json.loads(addr_json or "[]")
    if not entries:
        return None
    entry = entries[0]
    v4: list[str] = []
    v6: list[str] = []
    for info in entry.get("addr_info") or []:
        if info.get("scope") != "global" or not info.get("local"):
            continue
        address = f"{info['local']}/{info['prefixlen']}"
        (v4 if info.get("family") == "inet" else v6).append(address)
    routes: list[tuple[str, str]] = []
    for route in json.loads(route_json or "[]"):
        destination = str(route.get("dst") or "")
        destination = "0.0.0.0/0" if destination == "default" else destination
        if destination and "/" not in destination:
            destination += "/32"
        routes.append((destination, str(route.get("gateway") or "")))
    return PodLink(
        str(entry["ifname"]), str(entry.get("address") or ""), int(entry["mtu"]), tuple(v4), tuple(v6), tuple(routes)
    )


def dhcp_routes(link: PodLink) -> tuple[tuple[str, str], ...]:
    """The routes the guest gets: the pod's non-local IPv4 routes, the default route last (KubeVirt's DHCP)."""
    if not link.ipv4:
        return ()
    local = ipaddress.IPv4Interface(link.ipv4[0]).network
    chosen = [
        (dst, hop)
        for dst, hop in link.routes
        if hop and (dst == "0.0.0.0/0" or not ipaddress.IPv4Network(dst).overlaps(local))
    ]
    return tuple(sorted(chosen, key=lambda r: r[0] == "0.0.0.0/0"))


def guest_mac(link: PodLink, iface: Mapping[str, Any]) -> str:
    """`interfaces[].macAddress` when given, else the pod interface's MAC (which moves to the guest)."""
    return str(iface.get("macAddress") or link.mac).lower()


def random_mac() -> str:
    """A random unicast, locally administered MAC (what the kernel gives a new bridge)."""
    octets = bytearray(os.urandom(6))
    octets[0] = (octets[0] & 0xFE) | 0x02
    return ":".join(f"{o:02x}" for o in octets)


def fake_bridge_ip(index: int) -> str:
    return f"{FAKE_BRIDGE_IP_BASE}{index}"


def ip_batch(link: PodLink, bridge_mac: str, index: int) -> list[str]:
    """The `ip -batch` lines of the bridge, its port and the tap, in KubeVirt's order."""
    bridge, nic, tap = bridge_name(link.name), renamed_pod_iface(link.name), network_names.tap_name(link.name)
    # The bridge's address given, so a port with a lower MAC never changes it.
    lines = [f"link add {bridge} address {bridge_mac} type bridge"]
    lines += [f"addr add {fake_bridge_ip(index)}/32 dev {bridge}"] if link.ipv4 else []
    lines += [
        f"link set {bridge} up",
        f"link set {link.name} down",
        f"link set {link.name} name {nic}",
        # Its own MAC would make the guest's frames local to the bridge: it takes the bridge's.
        f"link set {nic} address {bridge_mac} master {bridge}",
        f"addr flush dev {nic}",
        f"link set {nic} up",
        f"link set dev {nic} type bridge_slave learning off",
        f"tuntap add mode tap name {tap}",
        f"link set {tap} mtu {link.mtu} master {bridge} up",
    ]
    return lines


def holder_batch(link: PodLink, kind: str) -> list[str]:
    """The `ip -batch` lines of the device (left down) that keeps the pod interface's name, MAC and addresses."""
    lines = [f"link add {link.name} type {kind}", f"link set {link.name} address {link.mac} mtu {link.mtu}"]
    lines += [f"addr add {address} dev {link.name}" for address in link.ipv4]
    lines += [f"addr add {address} dev {link.name} nodad" for address in link.ipv6]
    return lines


async def discover(name: str = POD_IFACE) -> PodLink | None:
    """The pod interface's addresses, MAC, MTU and routes, read with `ip -j`."""
    addr = await _output(["ip", "-j", "addr", "show", "dev", name])
    routes = await _output(["ip", "-j", "-4", "route", "show", "dev", name])
    return parse_link(addr, routes)


async def _output(argv: Sequence[str]) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await process.communicate()
    return out.decode() if process.returncode == 0 else ""


def _tx_checksum_off(device: str) -> None:
    """What `ethtool -K DEV tx off` does (KubeVirt's TXChecksumOff on the bridge): the DHCP server's UDP replies
    leave the bridge with a full checksum, which guests without checksum offload need. ethtool is not installed."""
    value = array.array("I", [ETHTOOL_STXCSUM, 0])
    request = struct.pack("16sP", device.encode(), value.buffer_info()[0])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, request)


def _sysctl(key: str, value: str) -> None:
    with open(f"/proc/sys/{key}", "w") as sysctl:
        sysctl.write(value)


def read_cache(path: Path) -> PodLink | None:
    try:
        data = json.loads(path.read_text())
        return PodLink(
            data["name"], data["mac"], int(data["mtu"]), tuple(data["ipv4"]), tuple(data["ipv6"]),
            tuple((str(d), str(h)) for d, h in data["routes"]),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(path: Path, link: PodLink) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(link)))
    os.replace(tmp, path)


async def plumb(
    iface: Mapping[str, Any], index: int, hostname: str, cache: Path, pod_iface: str = POD_IFACE
) -> tuple[PodLink, asyncio.DatagramTransport | None]:
    """Move the pod's address to the guest (once: a restarted launcher finds the bridge and its cache) and serve
    DHCP (every start; none when the pod interface has no IPv4, KubeVirt's IPAMDisabled). A secondary network's
    guest gets a router only when its network has a gateway, so its default route stays on the pod network."""
    bridge = bridge_name(pod_iface)
    if link_exists(bridge):
        link = read_cache(cache)
        if link is None:
            raise PlumbingError(f"{bridge} exists but the pod interface's cache {cache} is gone")
    else:
        found = await discover(pod_iface)
        if found is None:
            raise PlumbingError(f"pod link ({pod_iface}) is missing")
        link = found
        _write_cache(cache, link)
        if os.path.exists(f"/proc/sys/net/ipv6/conf/{pod_iface}"):
            # Before the port comes up, so it never gets a link-local address (KubeVirt: IPv6 disabled on it).
            _sysctl(f"net/ipv6/conf/{pod_iface}/disable_ipv6", "1")
        await run_checked(["ip", "-batch", "-"], "\n".join(ip_batch(link, random_mac(), index)) + "\n")
        try:
            _tx_checksum_off(bridge)
        except OSError as exc:
            log.warning("could not turn tx checksum offload off on %s: %s", bridge, exc)
        try:
            await run_checked(["ip", "-batch", "-"], "\n".join(holder_batch(link, "dummy")) + "\n")
        except PlumbingError:
            # Kernels without CONFIG_DUMMY (this project's host): an empty bridge, never up, holds them as well.
            with contextlib.suppress(PlumbingError):
                await run_checked(["ip", "link", "delete", link.name])
            await run_checked(["ip", "-batch", "-"], "\n".join(holder_batch(link, "bridge")) + "\n")
        if link.ipv4:
            _sysctl("net/ipv4/conf/all/arp_ignore", "1")
        tap = network_names.tap_name(pod_iface)
        log.info("bridge binding plumbed: pod %s %s moves to the guest on %s", pod_iface, ", ".join(link.ips), tap)
    if not link.ipv4:
        return link, None
    primary = pod_iface == POD_IFACE
    servers, search = resolv_conf()
    try:
        extra = dhcp_server.interface_options(iface.get("dhcpOptions") or {})
    except ValueError as exc:
        raise PlumbingError(str(exc)) from exc
    guest = ipaddress.IPv4Interface(link.ipv4[0])
    lease = dhcp_server.Lease(
        str(guest.ip), guest.network.prefixlen, link.gateway or (fake_bridge_ip(index) if primary else ""),
        fake_bridge_ip(index), link.mtu, tuple(servers), **lease_names(hostname, search),
        client_mac=guest_mac(link, iface), routes=dhcp_routes(link), extra=extra,
    )  # fmt: skip
    return link, await dhcp_server.serve(bridge, lease)
