"""The `bridge` binding of secondary (Multus) networks inside the launcher's pod, as KubeVirt plumbs it: the same
in-pod bridge as on the pod network (`bridge_binding`), on the CNI interface `pod<hash>` (`<hash>-nic` on
`k6t-<hash>` next to `tap<hash>`), with DHCP to the guest's second NIC when the network's IPAM gave an address.
Without IPAM the guest is configured statically (cloud-init networkData), as in KubeVirt."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api.kubevirt import network_names
from pykubevirt.launcher import bridge_binding, masquerade


@dataclass(slots=True)
class SecondaryNetworks:
    """Interface name → the guest MAC, MTU and pod IPs of each plumbed secondary interface; their DHCP servers."""

    macs: dict[str, str] = field(default_factory=dict)
    mtus: dict[str, int] = field(default_factory=dict)
    pod_ips: dict[str, list[str]] = field(default_factory=dict)
    dhcp: list[asyncio.DatagramTransport] = field(default_factory=list)

    def close(self) -> None:
        for server in self.dhcp:
            server.close()


def bridge_interfaces(vmi: Mapping[str, Any]) -> list[tuple[int, dict[str, Any], str]]:
    """(index among the VMI's interfaces, the interface, its pod interface) of each bridge-bound Multus network."""
    spec = vmi.get("spec") or {}
    networks = {str(n.get("name")): n for n in spec.get("networks") or []}
    found = []
    for index, iface in enumerate(((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []):
        network = networks.get(str(iface.get("name"))) or {}
        if iface.get("bridge") is not None and iface.get("state") != "absent":
            if network_names.is_secondary_multus(network):
                found.append((index, dict(iface), network_names.pod_interface(network)))
    return found


def cache_file(cache_dir: Path, pod_iface: str) -> Path:
    return cache_dir / f"interface-cache-{pod_iface}.json"


def recorded_pod_ips(vmi: Mapping[str, Any], cache_dir: Path) -> dict[str, list[str]]:
    """The pod IPs of the secondary interfaces a previous launcher of this pod plumbed."""
    found = {}
    for _, iface, pod_iface in bridge_interfaces(vmi):
        link = bridge_binding.read_cache(cache_file(cache_dir, pod_iface))
        if link is not None:
            found[str(iface["name"])] = link.ips
    return found


async def plumb(vmi: Mapping[str, Any], hostname: str, cache_dir: Path) -> SecondaryNetworks:
    """Every bridge-bound secondary interface (only in the pod's own namespace, where Multus attached them)."""
    plumbed = SecondaryNetworks()
    interfaces = bridge_interfaces(vmi)
    if interfaces and masquerade.in_host_network():
        raise masquerade.PlumbingError("secondary networks need the pod's own network namespace")
    for index, iface, pod_iface in interfaces:
        cache = cache_file(cache_dir, pod_iface)
        link, dhcp = await bridge_binding.plumb(iface, index, hostname, cache, pod_iface)
        name = str(iface["name"])
        plumbed.macs[name] = bridge_binding.guest_mac(link, iface)
        plumbed.mtus[name] = link.mtu
        plumbed.pod_ips[name] = link.ips
        if dhcp is not None:
            plumbed.dhcp.append(dhcp)
    return plumbed
