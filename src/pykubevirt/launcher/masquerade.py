"""The `masquerade` binding inside the launcher's pod network namespace, as KubeVirt plumbs it
(`pkg/network/setup/netpod`, `masquerade/masquerade.go`): bridge `k6t-eth0` (10.0.2.1/24) with tap `tap0` for the
guest (10.0.2.2 by the launcher's DHCP), and nftables NAT so the pod IP's inbound traffic (only `ports`, when given)
reaches the guest and the guest's outbound traffic leaves as the pod IP.

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

from pykubevirt.launcher import dhcp_server

log = logging.getLogger("pykubevirt.launcher.masquerade")

POD_IFACE = "eth0"
BRIDGE = "k6t-eth0"
TAP = "tap0"
GATEWAY = "10.0.2.1"
GUEST = "10.0.2.2"
PREFIX = 24
BRIDGE_MAC = "02:00:00:00:00:00"
LOOPBACK = "127.0.0.1"


class PlumbingError(Exception):
    """The pod's network could not be plumbed for the guest."""


@dataclass(frozen=True, slots=True)
class PodInterface:
    """The pod's primary interface as CNI left it."""

    name: str
    mtu: int
    ipv4: tuple[str, ...]
    mac: str = ""


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
    """The pod interface with its IPv4 addresses, None when this namespace has none (no pod network, or the host's)."""
    if in_host_network() or not link_exists(name):
        return None
    out = subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", name], capture_output=True, text=True, check=False)
    try:
        entries: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    except ValueError:
        return None
    addresses = tuple(
        str(info["local"]) for entry in entries for info in entry.get("addr_info") or [] if info.get("local")
    )
    if not addresses:
        return None
    return PodInterface(name, int(entries[0]["mtu"]), addresses, str(entries[0].get("address") or "").lower())


def nft_commands(ports: Sequence[Mapping[str, Any]], pod_iface: str = POD_IFACE) -> list[str]:
    """KubeVirt's IPv4 masquerade rules, in its order (`masquerade.go`), as `nft` command lines."""
    fam, lo = "ip", LOOPBACK
    commands = [
        f"add table {fam} nat",
        f"add chain {fam} nat prerouting {{ type nat hook prerouting priority -100; }}",
        f"add chain {fam} nat input {{ type nat hook input priority 100; }}",
        f"add chain {fam} nat output {{ type nat hook output priority -100; }}",
        f"add chain {fam} nat postrouting {{ type nat hook postrouting priority 100; }}",
        f"add chain {fam} nat KUBEVIRT_PREINBOUND",
        f"add chain {fam} nat KUBEVIRT_POSTINBOUND",
        f"add rule {fam} nat postrouting {fam} saddr {GUEST} counter masquerade",
        f"add rule {fam} nat prerouting iifname {pod_iface} counter jump KUBEVIRT_PREINBOUND",
        f"add rule {fam} nat postrouting oifname {BRIDGE} counter jump KUBEVIRT_POSTINBOUND",
    ]
    if not ports:
        return [
            *commands,
            f"add rule {fam} nat KUBEVIRT_PREINBOUND counter dnat to {GUEST}",
            f"add rule {fam} nat KUBEVIRT_POSTINBOUND {fam} saddr {{ {lo} }} counter snat to {GATEWAY}",
            f"add rule {fam} nat output {fam} daddr {{ {lo} }} counter dnat to {GUEST}",
        ]
    for port in ports:
        proto = str(port.get("protocol") or "TCP").lower()
        number = int(port["port"])
        commands += [
            f"add rule {fam} nat KUBEVIRT_PREINBOUND {proto} dport {{ {number} }} counter dnat to {GUEST}",
            f"add rule {fam} nat KUBEVIRT_POSTINBOUND {proto} dport {number} {fam} saddr {{ {lo} }} "
            f"counter snat to {GATEWAY}",
            f"add rule {fam} nat output {fam} daddr {{ {lo} }} {proto} dport {number} counter dnat to {GUEST}",
        ]
    return commands


def resolv_conf(path: str = "/etc/resolv.conf") -> tuple[list[str], list[str]]:
    """The pod's IPv4 nameservers and search domains (what the guest's DHCP lease passes on)."""
    servers: list[str] = []
    search: list[str] = []
    try:
        with open(path) as conf:
            for line in conf:
                words = line.split()
                if len(words) >= 2 and words[0] == "nameserver" and ":" not in words[1]:
                    servers.append(words[1])
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


def _sysctl_on(key: str) -> None:
    """A sysctl of this namespace set to 1 (a /proc write: no process to start)."""
    with open(f"/proc/sys/{key}", "w") as sysctl:
        sysctl.write("1")


async def plumb(iface: Mapping[str, Any], pod: PodInterface, hostname: str) -> asyncio.DatagramTransport:
    """Bridge, tap, sysctls, nft rules (once: a restarted launcher finds them) and the DHCP server (every start)."""
    if not link_exists(BRIDGE):
        # One `ip` process for every link step: each process start is most of the cost on a busy host.
        batch = [
            f"link add {BRIDGE} type bridge",
            f"link set {BRIDGE} mtu {pod.mtu} address {BRIDGE_MAC}",
            f"addr add {GATEWAY}/{PREFIX} dev {BRIDGE}",
            f"tuntap add mode tap name {TAP}",
            f"link set {TAP} mtu {pod.mtu} master {BRIDGE} up",
            f"link set {BRIDGE} up",
        ]
        await run_checked(["ip", "-batch", "-"], "\n".join(batch) + "\n")
        for key in (f"net/ipv4/conf/{BRIDGE}/route_localnet", "net/ipv4/ip_forward"):
            _sysctl_on(key)
        await run_checked(["nft", "-f", "-"], "\n".join(nft_commands(iface.get("ports") or [], pod.name)) + "\n")
        log.info("masquerade plumbed: pod %s %s, guest %s on %s", pod.name, pod.ipv4[0], GUEST, TAP)
    servers, search = resolv_conf()
    try:
        extra = dhcp_server.interface_options(iface.get("dhcpOptions") or {})
    except ValueError as exc:
        raise PlumbingError(str(exc)) from exc
    lease = dhcp_server.Lease(
        GUEST, PREFIX, GATEWAY, GATEWAY, pod.mtu, tuple(servers), **lease_names(hostname, search), extra=extra
    )
    return await dhcp_server.serve(BRIDGE, lease)
