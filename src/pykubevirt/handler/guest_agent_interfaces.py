"""The guest agent's part of `status.interfaces`: guest names and addresses merged into what the domain reports.

Upstream: pkg/network/setup/netstat.go (updateIfacesStatusFromGuestAgent), pkg/network/vmispec/infosource.go.
An interface the domain has and the agent reports (same MAC) gains the guest's `interfaceName`, the
`guest-agent` info source and the guest's addresses of any IP family the pod-interface cache left empty;
interfaces only the guest knows are listed after them (at most 10) with `infoSource: guest-agent`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Final

INFO_SOURCE_DOMAIN: Final = "domain"
INFO_SOURCE_GUEST_AGENT: Final = "guest-agent"
INFO_SOURCE_MULTUS: Final = "multus-status"
GUEST_ONLY_LIMIT: Final = 10
_ORDER: Final = (INFO_SOURCE_DOMAIN, INFO_SOURCE_GUEST_AGENT, INFO_SOURCE_MULTUS)


def add_info_source(current: str, source: str) -> str:
    """`domain, guest-agent`: the comma-space list, each source once, in KubeVirt's order."""
    sources = {s.strip() for s in current.split(",") if s.strip()} | {source}
    return ", ".join([s for s in _ORDER if s in sources] + sorted(sources - set(_ORDER)))


def _family(ip: str) -> int:
    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return 0


def _link_local(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_link_local
    except ValueError:
        return False


def _masquerade(spec_interfaces: Sequence[Mapping[str, Any]], name: str) -> bool:
    return any(i.get("name") == name and i.get("masquerade") is not None for i in spec_interfaces)


def merge(
    interfaces: Sequence[Mapping[str, Any]],
    agent_interfaces: Sequence[Mapping[str, Any]],
    spec_interfaces: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """`interfaces` (the domain's, from the launcher) with what the guest agent reported merged in."""
    result = [dict(i) for i in interfaces]
    by_mac = {str(i.get("mac") or "").lower(): i for i in result if i.get("mac")}
    guest_only: list[dict[str, Any]] = []
    # A domain interface reported without its MAC could be any of the guest's: none is then called guest-only.
    unmatched_allowed = all(i.get("mac") for i in result)
    for guest in agent_interfaces:
        mac = str(guest.get("mac") or "").lower()
        guest_ips = [str(ip) for ip in guest.get("ipAddresses") or []]
        entry = by_mac.get(mac) if mac else None
        if entry is None:
            if unmatched_allowed and len(guest_only) < GUEST_ONLY_LIMIT:
                only: dict[str, Any] = {
                    "interfaceName": guest.get("interfaceName", ""),
                    "mac": guest.get("mac", ""),
                    "infoSource": INFO_SOURCE_GUEST_AGENT,
                }
                if guest_ips:
                    only["ipAddress"] = guest.get("ipAddress") or guest_ips[0]
                    only["ipAddresses"] = guest_ips
                guest_only.append(only)
            continue
        entry["interfaceName"] = guest.get("interfaceName", "")
        entry["infoSource"] = add_info_source(str(entry.get("infoSource") or ""), INFO_SOURCE_GUEST_AGENT)
        if _masquerade(spec_interfaces, str(entry.get("name") or "")):
            # The guest's link-local address behind masquerade is reachable from nowhere outside the pod.
            guest_ips = [ip for ip in guest_ips if not _link_local(ip)]
        known = [str(ip) for ip in entry.get("ipAddresses") or []]
        families = {_family(ip) for ip in known}
        added = [ip for ip in guest_ips if _family(ip) not in families]
        if added:
            entry["ipAddresses"] = known + added
            entry["ipAddress"] = entry["ipAddresses"][0]
    return result + guest_only
