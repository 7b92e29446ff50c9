"""Per-interface fields: name, model, MAC and PCI address, forwarded ports and port ranges, DHCP options."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import is_ipv4, is_pci_address, is_valid_port_name, parse_mac
from pykubevirt.api.causes import Cause, FieldPath, duplicate, invalid, not_supported, required
from pykubevirt.api.json_lookup import as_int, as_list, as_map, as_str, get

VALID_INTERFACE_MODELS = frozenset({"e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio"})
_IFACE_NAME_RE = re.compile(r"^[A-Za-z0-9-_]+$")
_MAX_PORT_RANGES = 10


def validate_interfaces_fields(
    field: FieldPath,
    spec: Mapping[str, Any],
    networks_by_name: Mapping[str, Mapping[str, Any]],
    ctx: AdmissionContext,
) -> list[Cause]:
    causes: list[Cause] = []
    for idx, raw in enumerate(as_list(get(spec, "domain", "devices", "interfaces"))):
        iface = as_map(raw)
        path = field.child("domain", "devices", "interfaces").index(idx)
        network = networks_by_name.get(as_str(iface.get("name")), {})
        causes += _name_format(path, iface)
        causes += _model(path, iface)
        causes += _mac_address(path, iface)
        causes += _pci_address(path, iface)
        causes += _ports(path, iface, network)
        causes += _port_ranges(path, iface, network, ctx)
        causes += _dhcp_options(field, path, iface)
    return causes


def _name_format(path: FieldPath, iface: Mapping[str, Any]) -> list[Cause]:
    if _IFACE_NAME_RE.match(as_str(iface.get("name"))):
        return []
    return [
        invalid(
            str(path.child("name")),
            "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)",
        )
    ]


def _model(path: FieldPath, iface: Mapping[str, Any]) -> list[Cause]:
    model = as_str(iface.get("model"))
    if not model or model in VALID_INTERFACE_MODELS:
        return []
    return [
        not_supported(
            str(path.child("model")), f"interface {path.child('name')} uses model {model} that is not supported."
        )
    ]


def _mac_address(path: FieldPath, iface: Mapping[str, Any]) -> list[Cause]:
    mac = as_str(iface.get("macAddress"))
    if not mac:
        return []
    octets = parse_mac(mac)
    if octets is None:
        problem = f"malformed MAC address ({mac})"
    elif octets > 6:
        problem = f"too long MAC address ({mac})"
    else:
        return []
    return [invalid(str(path.child("macAddress")), f"interface {path.child('name')} has {problem}.")]


def _pci_address(path: FieldPath, iface: Mapping[str, Any]) -> list[Cause]:
    pci = as_str(iface.get("pciAddress"))
    if not pci or is_pci_address(pci):
        return []
    return [
        invalid(str(path.child("pciAddress")), f"interface {path.child('name')} has malformed PCI address ({pci}).")
    ]


def _ports(path: FieldPath, iface: Mapping[str, Any], network: Mapping[str, Any]) -> list[Cause]:
    if network.get("pod") is None or iface.get("ports") is None:
        return []
    ports = [as_map(p) for p in as_list(iface.get("ports"))]
    causes: list[Cause] = []
    seen: set[str] = set()
    for port_idx, port in enumerate(ports):
        name = as_str(port.get("name"))
        if not name:
            continue
        name_path = str(path.child("ports").index(port_idx).child("name"))
        if name in seen:
            causes.append(duplicate(name_path, f"Duplicate name of the port: {name}"))
        if not is_valid_port_name(name):
            causes.append(invalid(name_path, f"Invalid name of the port: {name}"))
        seen.add(name)
    for port_idx, port in enumerate(ports):
        port_path = path.child("ports").index(port_idx)
        number = as_int(port.get("port"))
        if number == 0:
            causes.append(required(str(port_path.child("port")), "Port field is mandatory."))
        if number < 0 or number >= 65536:
            causes.append(invalid(str(port_path.child("port")), "Port field must be in range 0 < x < 65536."))
        protocol = as_str(port.get("protocol"))
        if protocol and protocol not in ("TCP", "UDP"):
            causes.append(invalid(str(port_path.child("protocol")), "Unknown protocol, only TCP or UDP allowed"))
    return causes


def _port_ranges(
    path: FieldPath, iface: Mapping[str, Any], network: Mapping[str, Any], ctx: AdmissionContext
) -> list[Cause]:
    name_path = str(path.child("name"))
    if not ctx.config.gate_enabled("PortRangesSpec"):
        if iface.get("portRanges") is not None:
            return [
                invalid(
                    name_path, "portRanges is specified on interface but the PortRangesSpec feature gate is not enabled"
                )
            ]
        return []
    if network.get("pod") is None or iface.get("portRanges") is None:
        return []
    causes: list[Cause] = []
    if iface.get("ports") is not None:
        causes.append(invalid(name_path, "Cannot define both ports and portRanges on interface"))
    if iface.get("masquerade") is None:
        causes.append(invalid(name_path, "portRanges are only supported on masquerade interfaces"))
    causes += _port_range_values(path, [as_map(r) for r in as_list(iface.get("portRanges"))])
    return causes


def _port_range_values(path: FieldPath, ranges: list[dict[str, Any]]) -> list[Cause]:
    ranges_path = path.child("portRanges")
    if len(ranges) > _MAX_PORT_RANGES:
        return [invalid(str(ranges_path), "No more than 10 portRanges are allowed")]
    causes: list[Cause] = []
    by_protocol: dict[str, list[tuple[int, int]]] = {}
    for idx, rng in enumerate(ranges):
        protocol, start, end = as_str(rng.get("protocol")), as_int(rng.get("start")), as_int(rng.get("end"))
        item = ranges_path.index(idx)
        if protocol not in ("TCP", "UDP"):
            causes.append(invalid(str(item.child("protocol")), "Unknown protocol, only TCP or UDP allowed"))
        elif start <= 0 or start >= 65536:
            causes.append(invalid(str(item.child("start")), "Start must be a valid port number, 0 < x < 65536"))
        elif end <= 0 or end >= 65536:
            causes.append(invalid(str(item.child("end")), "End must be a valid port number, 0 < x < 65536"))
        elif start > end:
            causes.append(invalid(str(item.child("start")), "Start must be less than or equal to end"))
        else:
            by_protocol.setdefault(protocol, []).append((start, end))
    # Upstream iterates a Go map here, so the order across protocols is unspecified; TCP first keeps it stable.
    for protocol in sorted(by_protocol):
        intervals = sorted(by_protocol[protocol])
        for prev, curr in itertools.pairwise(intervals):
            if curr[0] <= prev[1]:
                causes.append(
                    invalid(
                        str(ranges_path),
                        f"{protocol} portRanges [{prev[0]}-{prev[1]}] and [{curr[0]}-{curr[1]}] overlap",
                    )
                )
    return causes


def _dhcp_options(field: FieldPath, path: FieldPath, iface: Mapping[str, Any]) -> list[Cause]:
    dhcp = iface.get("dhcpOptions")
    if dhcp is None:
        return []
    causes: list[Cause] = []
    options = [as_map(o) for o in as_list(get(dhcp, "privateOptions"))]
    numbers = [as_int(o.get("option")) for o in options]
    # Upstream reports these two on the spec path itself, not on the option.
    if len(set(numbers)) < len(numbers):
        causes.append(invalid(str(field), "Found Duplicates: you have provided duplicate DHCPPrivateOptions"))
    for number in numbers:
        if not 224 <= number <= 254:
            causes.append(
                invalid(str(field), "provided DHCPPrivateOptions are out of range, must be in range 224 to 254")
            )
    for idx, server in enumerate(as_list(get(dhcp, "ntpServers"))):
        if not (isinstance(server, str) and is_ipv4(server)):
            causes.append(
                invalid(
                    str(path.child("dhcpOptions", "ntpServers").index(idx)),
                    "NTP servers must be a list of valid IPv4 addresses.",
                )
            )
    return causes
