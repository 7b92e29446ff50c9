"""`status.interfaces` as two writers share it (KubeVirt's `pkg/network/vmispec/infosource.go`,
`pkg/network/controllers/vmi.go`): virt-handler reports what the domain shows, virt-controller adds what Multus's
network-status says (the `multus-status` source and `podInterfaceName`), and neither drops the other's part."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pykubevirt.api.kubevirt import network_names

DOMAIN = "domain"
GUEST_AGENT = "guest-agent"
MULTUS_STATUS = "multus-status"
SEPARATOR = ", "


def sources(entry: Mapping[str, Any]) -> list[str]:
    return [s for s in str(entry.get("infoSource") or "").split(SEPARATOR) if s]


def with_source(entry: Mapping[str, Any], token: str, present: bool) -> dict[str, Any]:
    """The entry with `token` added to (or removed from) its infoSource, the others kept in order."""
    tokens = [s for s in sources(entry) if s != token] + ([token] if present else [])
    result = {k: v for k, v in entry.items() if k != "infoSource"}
    if tokens:
        result["infoSource"] = SEPARATOR.join(tokens)
    return result


def keep_controller_part(current: Sequence[Mapping[str, Any]], reported: Sequence[Mapping[str, Any]]) -> list[Any]:
    """virt-handler's report with the controller's `multus-status` and `podInterfaceName` of the current status
    kept, and interfaces only Multus reports kept after the domain's."""
    previous = {str(e.get("name")): e for e in current if e.get("name")}
    merged = []
    for entry in reported:
        before = previous.get(str(entry.get("name"))) or {}
        result = dict(entry)
        if before.get("podInterfaceName") and not result.get("podInterfaceName"):
            result["podInterfaceName"] = before["podInterfaceName"]
        if MULTUS_STATUS in sources(before):
            result = with_source(result, MULTUS_STATUS, True)
        merged.append(result)
    names = {str(e.get("name")) for e in reported}
    merged += [dict(e) for e in current if str(e.get("name")) not in names and sources(e) == [MULTUS_STATUS]]
    return merged


def from_network_status(vmi: Mapping[str, Any], network_status: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The VMI's interfaces with each secondary Multus network that network-status lists marked `multus-status`
    (and given its pod interface name), the mark removed from those it no longer lists."""
    spec = vmi.get("spec") or {}
    current = [dict(e) for e in (vmi.get("status") or {}).get("interfaces") or []]
    reported = {str(e.get("interface")) for e in network_status}
    by_name = {str(e.get("name")): i for i, e in enumerate(current)}
    for network in spec.get("networks") or []:
        if not network_names.is_secondary_multus(network):
            continue
        name, pod_iface = str(network.get("name")), network_names.pod_interface(network)
        present = pod_iface in reported
        index = by_name.get(name)
        if index is None:
            if present:
                current.append({"name": name, "podInterfaceName": pod_iface, "infoSource": MULTUS_STATUS})
            continue
        entry = with_source(current[index], MULTUS_STATUS, present)
        if present:
            entry["podInterfaceName"] = pod_iface
        current[index] = entry
    return [e for e in current if sources(e) or e.get("ipAddress") or e.get("mac")]
