"""The guest's interface on the pod network, as the launcher plumbs it before the domain starts: `masquerade` or
`bridge` inside the pod's own namespace, or QEMU user networking, explicitly and with a reason, only where the pod
has no network namespace of its own (a launcher the embedded node ran in the host's)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api.kubevirt import network_names
from pykubevirt.launcher import bridge_binding, masquerade
from pykubevirt.launcher.converter.context import NetworkMode

log = logging.getLogger("pykubevirt.launcher.network")

POD_IFACE = "eth0"
# The address QEMU's user networking (SLIRP) gives the guest; status reports it for a guest on the fallback.
USER_GUEST_IP = "10.0.2.15"


@dataclass(slots=True)
class PrimaryNetwork:
    """What the launcher decided and set up for the pod network's interface."""

    mode: NetworkMode = "user"
    # Interface name → the MAC and MTU its domain NIC gets (the pod interface's, unless the spec names a MAC).
    macs: dict[str, str] = field(default_factory=dict)
    mtus: dict[str, int] = field(default_factory=dict)
    # Interface name → the pod IPs status reports for it (KubeVirt's pod-interface cache).
    pod_ips: dict[str, list[str]] = field(default_factory=dict)
    # Why the guest uses QEMU user networking, when it does.
    fallback: str = ""
    # The interface's DHCP server(s) (close() stops them).
    dhcp: asyncio.DatagramTransport | masquerade.Servers | None = None


def pod_network_interface(vmi: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The index and spec of the interface on the pod network (not marked absent), if any: a `pod` network, or the
    Multus network marked `default` that replaces it as the pod's eth0."""
    spec = vmi.get("spec") or {}
    pod_networks = {
        str(n.get("name"))
        for n in spec.get("networks") or []
        if n.get("pod") is not None or network_names.is_default_multus(n)
    }
    for index, iface in enumerate(((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []):
        if iface.get("name") in pod_networks and iface.get("state") != "absent":
            return index, dict(iface)
    return None


def binding_of(iface: Mapping[str, Any]) -> str:
    for key in ("masquerade", "bridge"):
        if iface.get(key) is not None:
            return key
    return ""


def _cache_file(cache_dir: Path) -> Path:
    return cache_dir / f"interface-cache-{POD_IFACE}.json"


def recorded_pod_ips(vmi: Mapping[str, Any], cache_dir: Path) -> dict[str, list[str]]:
    """The pod IPs of a network plumbed before this launcher started (a restart finds the guest running)."""
    found = pod_network_interface(vmi)
    if found is None:
        return {}
    name = str(found[1]["name"])
    link = bridge_binding.read_cache(_cache_file(cache_dir))
    if link is not None:
        return {name: link.ips}
    pod = masquerade.pod_interface()
    return {name: pod.ips if pod is not None else [USER_GUEST_IP]}


def hostname(vmi: Mapping[str, Any], name: str) -> str:
    return str((vmi.get("spec") or {}).get("hostname") or name.split(".")[0])


async def plumb(vmi: Mapping[str, Any], name: str, cache_dir: Path) -> PrimaryNetwork:
    """Plumb the pod network's interface for the guest; user networking (with the reason) without a namespace."""
    found = pod_network_interface(vmi)
    if found is None:
        return PrimaryNetwork()
    index, iface = found
    binding, iface_name = binding_of(iface), str(iface["name"])
    if not binding:
        return PrimaryNetwork()  # a binding the converter refuses with its own message
    if masquerade.in_host_network() or not (
        masquerade.link_exists(POD_IFACE) or masquerade.link_exists(bridge_binding.bridge_name(POD_IFACE))
    ):
        reason = (
            f"interface {iface_name}: the pod has no network namespace of its own, so the guest uses QEMU user "
            f"networking (10.0.2.15) instead of its {binding} binding and is not reachable at a pod IP"
        )
        log.warning("%s", reason)
        return PrimaryNetwork(pod_ips={iface_name: [USER_GUEST_IP]}, fallback=reason)
    guest_hostname = hostname(vmi, name)
    if binding == "bridge":
        link, dhcp = await bridge_binding.plumb(iface, index, guest_hostname, _cache_file(cache_dir), POD_IFACE)
        return PrimaryNetwork(
            "kubevirt",
            {iface_name: bridge_binding.guest_mac(link, iface)},
            {iface_name: link.mtu},
            {iface_name: link.ips},
            dhcp=dhcp,
        )
    pod = masquerade.pod_interface()
    if pod is None:
        reason = (
            f"interface {iface_name}: the pod interface has no IPv4 address, so the guest uses QEMU user networking"
        )
        log.warning("%s", reason)
        return PrimaryNetwork(pod_ips={iface_name: [USER_GUEST_IP]}, fallback=reason)
    mac = str(iface.get("macAddress") or pod.mac).lower()
    servers = await masquerade.plumb(iface, pod, guest_hostname)
    return PrimaryNetwork("kubevirt", {iface_name: mac}, {iface_name: pod.mtu}, {iface_name: pod.ips}, dhcp=servers)
