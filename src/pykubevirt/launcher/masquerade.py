"""The `masquerade` binding inside the launcher's pod network namespace, as KubeVirt plumbs it
(`pkg/network/setup/netpod`, `masquerade/masquerade.go`): bridge `k6t-eth0` (10.0.2.1/24) with tap `tap0` for the
guest (10.0.2.2 by the launcher's DHCP), and nftables NAT so the pod IP's inbound traffic (only `ports`, when given)
reaches the guest and the guest's outbound traffic leaves as the pod IP.

Where the pod has IPv6 (a dual-stack pod network) the same is done for that family: `fd10:0:2::1/120` on the bridge,
the guest's `fd10:0:2::2` by the launcher's DHCPv6 server with router advertisements for its default route
(`dhcpv6_server.py`), and the same rules in an `ip6 nat` table, so `ports` restricts IPv6 forwarding the same way.

Everything is created inside the pod's own namespace and dies with it; nothing here touches the host's namespace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykubevirt.launcher import dhcp_server, dhcpv6_server

log = logging.getLogger("pykubevirt.launcher.masquerade")

POD_IFACE = "eth0"
BRIDGE = "k6t-eth0"
TAP = "tap0"
GATEWAY = "10.0.2.1"
GUEST = "10.0.2.2"
PREFIX = 24
GATEWAY6 = "fd10:0:2::1"
GUEST6 = "fd10:0:2::2"
PREFIX6 = 120
BRIDGE_MAC = "02:00:00:00:00:00"
LOOPBACK = "127.0.0.1"
LOOPBACK6 = "::1"


class PlumbingError(Exception):
    """The pod's network could not be plumbed for the guest."""


@dataclass(frozen=True, slots=True)
class PodInterface:
    """The pod's primary interface as CNI left it."""

    name: str
    mtu: int
    ipv4: tuple[str, ...]
    mac: str = ""
    # Global IPv6 addresses (a dual-stack pod network); link-local ones are not the pod's IPs.
    ipv6: tuple[str, ...] = ()

    @property
    def ips(self) -> list[str]:
        """The pod IPs status reports: IPv4 first, then IPv6."""
        return [*self.ipv4, *self.ipv6]


# The kernel's fixed inode number of the initial PID namespace (PROC_PID_INIT_INO).
INITIAL_PID_NAMESPACE = 0xEFFFFFFC


def _interface_names(pid: str) -> set[str]:
    with open(f"/proc/{pid}/net/dev") as dev:
        return {line.split(":", 1)[0].strip() for line in dev.readlines()[2:]}


def in_host_network() -> bool:
    """Whether this process shares the host's network namespace (a launcher the embedded node ran without a pod
    network): nothing is ever plumbed there. In the initial PID namespace PID 1 is the host's init; its namespace is
    compared by inode where permitted, else by its devices (the host has the pod network's own veth, a pod never)."""
    try:
        if os.stat("/proc/self/ns/pid").st_ino != INITIAL_PID_NAMESPACE:
            return False  # a real pod: its PID 1 is the pod's, not the host's
        try:
            return os.stat("/proc/self/ns/net").st_ino == os.stat("/proc/1/ns/net").st_ino
        except PermissionError:
            return _interface_names("self") == _interface_names("1")
    except OSError:
        return True


def link_exists(name: str) -> bool:
    """Whether this network namespace has the device. /proc/self/net is the namespace's own; /sys is not (a pod
    entered only the network namespace, so /sys/class/net still shows the host's devices)."""
    return name in _interface_names("self")


def pod_interface(name: str = POD_IFACE) -> PodInterface | None:
    """The pod interface with its addresses, None when this namespace has none (no pod network, or the host's) or
    it has no IPv4 address."""
    if in_host_network() or not link_exists(name):
        return None
    out = subprocess.run(["ip", "-j", "addr", "show", "dev", name], capture_output=True, text=True, check=False)
    try:
        entries: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    except ValueError:
        return None
    infos = [info for entry in entries for info in entry.get("addr_info") or [] if info.get("local")]
    addresses = tuple(str(info["local"]) for info in infos if info.get("family") == "inet")
    ipv6 = tuple(
        str(info["local"]) for info in infos if info.get("family") == "inet6" and info.get("scope") == "global"
    )
    if not addresses:
        return None
    return PodInterface(name, int(entries[0]["mtu"]), addresses, str(entries[0].get("address") or "").lower(), ipv6)


def nft_commands(ports: Sequence[Mapping[str, Any]], pod_iface: str = POD_IFACE, *, ipv6: bool = False) -> list[str]:
    """KubeVirt's masquerade rules of one family (IPv4, or with `ipv6` the `ip6` table), in its order
    (`masquerade.go`), as `nft` command lines."""
    fam, lo, guest, gateway = ("ip6", LOOPBACK6, GUEST6, GATEWAY6) if ipv6 else ("ip", LOOPBACK, GUEST, GATEWAY)
    commands = [
        f"add table {fam} nat",
        f"add chain {fam} nat prerouting {{ type nat hook prerouting priority -100; }}",
        f"add chain {fam} nat input {{ type nat hook input priority 100; }}",
        f"add chain {fam} nat output {{ type nat hook output priority -100; }}",
        f"add chain {fam} nat postrouting {{ type nat hook postrouting priority 100; }}",
        f"add chain {fam} nat KUBEVIRT_PREINBOUND",
        f"add chain {fam} nat KUBEVIRT_POSTINBOUND",
        f"add rule {fam} nat postrouting {fam} saddr {guest} counter masquerade",
        f"add rule {fam} nat prerouting iifname {pod_iface} counter jump KUBEVIRT_PREINBOUND",
        f"add rule {fam} nat postrouting oifname {BRIDGE} counter jump KUBEVIRT_POSTINBOUND",
    ]
    if not ports:
        return [
            *commands,
            f"add rule {fam} nat KUBEVIRT_PREINBOUND counter dnat to {guest}",
            f"add rule {fam} nat KUBEVIRT_POSTINBOUND {fam} saddr {{ {lo} }} counter snat to {gateway}",
            f"add rule {fam} nat output {fam} daddr {{ {lo} }} counter dnat to {guest}",
        ]
    for port in ports:
        proto = str(port.get("protocol") or "TCP").lower()
        number = int(port["port"])
        commands += [
            f"add rule {fam} nat KUBEVIRT_PREINBOUND {proto} dport {{ {number} }} counter dnat to {guest}",
            f"add rule {fam} nat KUBEVIRT_POSTINBOUND {proto} dport {number} {fam} saddr {{ {lo} }} "
            f"counter snat to {gateway}",
            f"add rule {fam} nat output {fam} daddr {{ {lo} }} {proto} dport {number} counter dnat to {guest}",
        ]
    return commands


def resolv_conf(path: str = "/etc/resolv.conf", *, ipv6: bool = False) -> tuple[list[str], list[str]]:
    """The pod's IPv4 (or, with `ipv6`, IPv6) nameservers and search domains (what the guest's lease passes on)."""
    servers: list[str] = []
    search: list[str] = []
    try:
        with open(path) as conf:
            for line in conf:
                words = line.split()
                if len(words) >= 2 and words[0] == "nameserver" and (":" in words[1]) == ipv6:
                    servers.append(words[1].split("%")[0])
                elif len(words) >= 2 and words[0] == "search":
                    search = words[1:]
    except OSError:
        pass
    return servers, search


def lease_names(hostname: str, search: list[str]) -> dict[str, Any]:
    """The lease's naming fields: the host name (63 at most), the longest search domain and all of them."""
    return {"hostname": hostname[:63], "domain": max(search, key=len) if search else "", "search": tuple(search)}


async def run_checked(argv: Sequence[str], stdin: str | None = None) -> None:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate(stdin.encode() if stdin is not None else None)
    if process.returncode != 0:
        raise PlumbingError(f"{' '.join(argv)}: {err.decode(errors='replace').strip()}")


def _sysctl_on(key: str, value: str = "1") -> None:
    """A sysctl of this namespace set (to 1 by default; a /proc write: no process to start)."""
    with open(f"/proc/sys/{key}", "w") as sysctl:
        sysctl.write(value)


class Servers:
    """The launcher's servers for the guest's masquerade interface: DHCP, and DHCPv6 with router advertisements
    where the pod has IPv6. close() stops them all."""

    def __init__(self, dhcp: asyncio.DatagramTransport, *ipv6: asyncio.DatagramTransport | Any) -> None:
        self.dhcp = dhcp
        self.ipv6 = list(ipv6)

    def close(self) -> None:
        for server in [self.dhcp, *self.ipv6]:
            server.close()


async def plumb(iface: Mapping[str, Any], pod: PodInterface, hostname: str) -> Servers:
    """Bridge, tap, sysctls, nft rules (once: a restarted launcher finds them) and the DHCP servers (every start)."""
    if not link_exists(BRIDGE):
        if pod.ipv6:
            # The bridge's own addresses skip DAD, so it can answer the guest at once (they are the pod's alone).
            _sysctl_on("net/ipv6/conf/default/accept_dad", "0")
        # One `ip` process for every link step: each process start is most of the cost on a busy host.
        batch = [
            f"link add {BRIDGE} type bridge",
            f"link set {BRIDGE} mtu {pod.mtu} address {BRIDGE_MAC}",
            f"addr add {GATEWAY}/{PREFIX} dev {BRIDGE}",
            *([f"addr add {GATEWAY6}/{PREFIX6} dev {BRIDGE} nodad"] if pod.ipv6 else []),
            f"tuntap add mode tap name {TAP}",
            f"link set {TAP} mtu {pod.mtu} master {BRIDGE} up",
            f"link set {BRIDGE} up",
        ]
        await run_checked(["ip", "-batch", "-"], "\n".join(batch) + "\n")
        for key in (f"net/ipv4/conf/{BRIDGE}/route_localnet", "net/ipv4/ip_forward"):
            _sysctl_on(key)
        if pod.ipv6:
            _sysctl_on("net/ipv6/conf/all/forwarding")
        rules = nft_commands(iface.get("ports") or [], pod.name)
        if pod.ipv6:
            rules += nft_commands(iface.get("ports") or [], pod.name, ipv6=True)
        await run_checked(["nft", "-f", "-"], "\n".join(rules) + "\n")
        guests = f"{GUEST} and {GUEST6}" if pod.ipv6 else GUEST
        log.info("masquerade plumbed: pod %s, guest %s on %s", ", ".join(pod.ips), guests, TAP)
    servers, search = resolv_conf()
    try:
        extra = dhcp_server.interface_options(iface.get("dhcpOptions") or {})
    except ValueError as exc:
        raise PlumbingError(str(exc)) from exc
    lease = dhcp_server.Lease(
        GUEST, PREFIX, GATEWAY, GATEWAY, pod.mtu, tuple(servers), **lease_names(hostname, search), extra=extra
    )
    dhcp = await dhcp_server.serve(BRIDGE, lease)
    if not pod.ipv6:
        return Servers(dhcp)
    try:
        servers6, _ = resolv_conf(ipv6=True)
        dhcp6 = await dhcpv6_server.serve(BRIDGE, dhcpv6_server.Lease6(GUEST6, BRIDGE_MAC, tuple(servers6)))
        advertiser = await dhcpv6_server.advertise(BRIDGE, f"{GATEWAY6}/{PREFIX6}", pod.mtu, BRIDGE_MAC)
    except OSError as exc:
        dhcp.close()
        raise PlumbingError(f"the guest's IPv6 servers on {BRIDGE}: {exc}") from exc
    return Servers(dhcp, dhcp6, advertiser)
