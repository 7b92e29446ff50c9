"""`status.interfaces` as KubeVirt's virt-handler joins it (`pkg/network/setup/netstat.go` `UpdateStatus`, the
controller's `multus-status`, `pkg/network/vmispec/infosource.go`). Pure: data in, the list out.

Sources: the pod-interface cache (the pod IPs recorded when the network was set up), the domain's interfaces (MAC,
link state, queues, matched to the spec by alias `ua-<name>`), the guest agent's interfaces (matched by MAC) and
Multus' network-status (secondary networks present in the pod).
"""

from __future__ import annotations

import ipaddress
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DOMAIN, GUEST_AGENT, MULTUS_STATUS = "domain", "guest-agent", "multus-status"
ALIAS_PREFIX = "ua-"
# KubeVirt keeps at most this many interfaces the guest agent reports that the domain does not have.
MAX_GUEST_ONLY = 10
PRIMARY_POD_IFACE = "eth0"


@dataclass(frozen=True, slots=True)
class DomainInterface:
    """One `<interface>` of the running domain."""

    name: str
    mac: str
    link_state: str = "up"
    queues: int = 1


@dataclass(frozen=True, slots=True)
class GuestInterface:
    """One interface as the guest agent sees it (`guest-network-get-interfaces`)."""

    interface_name: str
    mac: str
    ips: tuple[str, ...] = ()


def domain_interfaces(xml: str) -> list[DomainInterface]:
    """The domain's interfaces that carry a spec alias, from its (live) XML."""
    found = []
    for iface in ET.fromstring(xml).findall("devices/interface"):
        alias_element = iface.find("alias")
        alias = (alias_element.get("name") or "") if alias_element is not None else ""
        if not alias.startswith(ALIAS_PREFIX):
            continue
        mac = iface.find("mac")
        link = iface.find("link")
        driver = iface.find("driver")
        found.append(
            DomainInterface(
                alias.removeprefix(ALIAS_PREFIX),
                (mac.get("address") or "").lower() if mac is not None else "",
                (link.get("state") or "up") if link is not None else "up",
                int(driver.get("queues") or 1) if driver is not None else 1,
            )
        )
    return found


def guest_interfaces(addresses: Mapping[str, Mapping[str, Any]]) -> list[GuestInterface]:
    """The guest agent's interfaces from libvirt's `interfaceAddresses(VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT)`
    answer (`{name: {"hwaddr": …, "addrs": [{"addr": …, "prefix": …, "type": …}]}}`), in name order."""
    return [
        GuestInterface(
            name,
            str(entry.get("hwaddr") or "").lower(),
            tuple(str(a["addr"]) for a in entry.get("addrs") or [] if a.get("addr")),
        )
        for name, entry in sorted(addresses.items())
    ]


def info_source(*tokens: str) -> str:
    """KubeVirt's comma-space list, always in the order domain, guest-agent, multus-status."""
    return ", ".join(t for t in (DOMAIN, GUEST_AGENT, MULTUS_STATUS) if t in tokens)


def _family(ip: str) -> int:
    return ipaddress.ip_address(ip).version


def _merge_ips(cached: Sequence[str], guest: Sequence[str], masquerade: bool) -> list[str]:
    """Pod IPs first; the guest's addresses only fill a family the cache lacks (never for masquerade, whose guest
    address is the private 10.0.2.2); link-local IPv6 the guest reports is dropped."""
    if masquerade:
        return list(cached)
    have = {_family(ip) for ip in cached}
    extra = [ip for ip in guest if _family(ip) not in have and not ipaddress.ip_address(ip).is_link_local]
    return [*cached, *extra]


def interface_statuses(
    vmi: Mapping[str, Any],
    domain: Sequence[DomainInterface],
    pod_ips: Mapping[str, Sequence[str]],
    guest: Sequence[GuestInterface] = (),
    network_status: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The VMI's `status.interfaces`: the spec's interfaces in spec order (the pod network's first), then interfaces
    only the guest agent reports. `pod_ips` maps interface names to cached pod IPs; `network_status` maps secondary
    network names Multus reported to their pod interface names."""
    spec = vmi.get("spec") or {}
    networks = {str(n.get("name")): n for n in spec.get("networks") or []}
    interfaces = [
        i for i in ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or [] if i.get("sriov") is None
    ]
    interfaces.sort(key=lambda i: (networks.get(str(i.get("name"))) or {}).get("pod") is None)
    by_name = {d.name: d for d in domain}
    guest_by_mac = {g.mac.lower(): g for g in guest if g.mac}
    matched: set[str] = set()
    result: list[dict[str, Any]] = []
    for iface in interfaces:
        name = str(iface.get("name"))
        network = networks.get(name) or {}
        entry: dict[str, Any] = {"name": name}
        tokens: list[str] = []
        dom = by_name.get(name)
        cached = list(pod_ips.get(name) or ())
        agent = guest_by_mac.get(dom.mac) if dom is not None and dom.mac else None
        if dom is not None:
            tokens.append(DOMAIN)
            if dom.mac:
                entry["mac"] = dom.mac
            entry["linkState"] = dom.link_state
            entry["queueCount"] = dom.queues
        if agent is not None:
            matched.add(agent.mac.lower())
            tokens.append(GUEST_AGENT)
            entry["interfaceName"] = agent.interface_name
        ips = _merge_ips(cached, agent.ips if agent else (), iface.get("masquerade") is not None)
        if ips:
            entry["ipAddress"] = ips[0]
            entry["ipAddresses"] = ips
        if network.get("pod") is not None:
            entry["podInterfaceName"] = PRIMARY_POD_IFACE
        elif network_status is not None and name in network_status:
            tokens.append(MULTUS_STATUS)
            entry["podInterfaceName"] = network_status[name]
        if tokens:
            entry["infoSource"] = info_source(*tokens)
        result.append(entry)
    guest_only = [g for g in guest if g.mac.lower() not in matched and g.interface_name != "lo"]
    for agent in guest_only[:MAX_GUEST_ONLY]:
        entry = {"interfaceName": agent.interface_name, "mac": agent.mac.lower(), "infoSource": GUEST_AGENT}
        if agent.ips:
            entry["ipAddress"] = agent.ips[0]
            entry["ipAddresses"] = list(agent.ips)
        result.append(entry)
    return result
