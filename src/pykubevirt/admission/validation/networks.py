"""Networks, interface↔network pairing, interface bindings and states (KubeVirt's pkg/network/admitter)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import is_true
from pykubevirt.admission.validation.interfaces import validate_interfaces_fields
from pykubevirt.api.causes import (
    FIELD_VALUE_DUPLICATE,
    FIELD_VALUE_INVALID,
    FIELD_VALUE_REQUIRED,
    Cause,
    FieldPath,
    duplicate,
    invalid,
    required,
)
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get

# The reserved MAC of the in-pod bridge that masquerade uses.
STATIC_MASQUERADE_BRIDGE_MAC = "02:00:00:00:00:00"
FIELD_VALUE_NOT_FOUND = "FieldValueNotFound"

_BINDING_KEYS = ("bridge", "masquerade", "sriov", "passtBinding", "binding")
_STATES = ("absent", "down", "up")


def interfaces_of(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [as_map(i) for i in as_list(get(spec, "domain", "devices", "interfaces"))]


def networks_of(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [as_map(n) for n in as_list(spec.get("networks"))]


def networks_by_name(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """vmispec.IndexNetworkSpecByName: the last network of a name wins."""
    return {as_str(n.get("name")): n for n in networks_of(spec)}


def is_pod_network(network: Mapping[str, Any]) -> bool:
    return network.get("pod") is not None


def lookup_pod_network(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    return next((n for n in networks_of(spec) if is_pod_network(n)), None)


def lookup_default_network(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    for n in networks_of(spec):
        if is_pod_network(n) or (n.get("multus") is not None and is_true(get(n, "multus", "default"))):
            return n
    return None


def validate_networks(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """netadmitter Validator.Validate, in upstream's order."""
    causes: list[Cause] = []
    causes += _single_pod_network(field, spec)
    causes += _single_network_source(field, spec)
    causes += _multus_network_source(field, spec)
    causes += _interface_state_values(field, spec)
    causes += _interface_bindings(field, spec, ctx)
    causes += _network_names_unique(field, spec)
    causes += _dra_networks(field, spec, ctx)
    causes += _networks_assigned_to_interfaces(field, spec)
    causes += _interface_names_unique(field, spec)
    causes += _interfaces_assigned_to_networks(field, spec)
    causes += validate_interfaces_fields(field, spec, networks_by_name(spec), ctx)
    return causes


def validate_networks_creation(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """netadmitter Validator.ValidateCreation: bindings discontinued in v1.3."""
    causes: list[Cause] = []
    ifaces = field.child("domain", "devices", "interfaces")
    for idx, iface in enumerate(interfaces_of(spec)):
        if iface.get("slirp") is not None:
            causes.append(
                invalid(
                    str(ifaces.index(idx).child("slirp")), "Slirp interface support has been discontinued since v1.3"
                )
            )
        if iface.get("passt") is not None:
            causes.append(
                invalid(str(ifaces.index(idx).child("passt")), "Passt network binding has been discontinued since v1.3")
            )
        if iface.get("macvtap") is not None:
            causes.append(
                invalid(
                    str(ifaces.index(idx).child("macvtap")), "Macvtap network binding has been discontinued since v1.3"
                )
            )
    return causes


def _single_pod_network(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    nets = networks_of(spec)
    pod_nets = [n for n in nets if is_pod_network(n)]
    multus_default = [n for n in nets if n.get("multus") is not None and is_true(get(n, "multus", "default"))]
    if len(pod_nets) > 1:
        path = field.child("interfaces")
        causes.append(duplicate(str(path), f"more than one interface is connected to a pod network in {path}"))
    if len(multus_default) > 1:
        causes.append(invalid(str(field.child("networks")), "Multus CNI should only have one default network"))
    if pod_nets and multus_default:
        causes.append(
            invalid(
                str(field.child("networks")), "Pod network cannot be defined when Multus default network is defined"
            )
        )
    return causes


def _single_network_source(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    for idx, net in enumerate(networks_of(spec)):
        count = sum(net.get(key) is not None for key in ("pod", "multus", "resourceClaim"))
        if count == 0:
            causes.append(required(str(field.child("networks").index(idx)), "should have a network type"))
        elif count > 1:
            causes.append(required(str(field.child("networks").index(idx)), "should have only one network type"))
    return causes


def _multus_network_source(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    # Upstream stops at the first offending network.
    for idx, net in enumerate(networks_of(spec)):
        if net.get("multus") is not None and not as_str(get(net, "multus", "networkName")):
            return [required(str(field.child("networks").index(idx)), "CNI delegating plugin must have a networkName")]
    return []


def _interface_state_values(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    default_net = lookup_default_network(spec)
    for idx, iface in enumerate(interfaces_of(spec)):
        name, state = as_str(iface.get("name")), as_str(iface.get("state"))
        path = str(field.child("domain", "devices", "interfaces").index(idx).child("state"))
        if state and state not in _STATES:
            causes.append(invalid(path, f"logical {name} interface state value is unsupported: {state}"))
        if iface.get("sriov") is not None and state in ("down", "up"):
            causes.append(invalid(path, f'"{name}" interface\'s state "{state}" is not supported for SR-IOV NICs'))
        if state == "absent" and iface.get("bridge") is None:
            causes.append(invalid(path, f'"{name}" interface\'s state "{state}" is supported only for bridge binding'))
        if state == "absent" and default_net is not None and as_str(default_net.get("name")) == name:
            causes.append(invalid(path, f'"{name}" interface\'s state "{state}" is not supported on default networks'))
    return causes


def _interface_bindings(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    causes: list[Cause] = []
    by_name = networks_by_name(spec)
    for idx, iface in enumerate(interfaces_of(spec)):
        path = field.child("domain", "devices", "interfaces").index(idx)
        name_path = str(path.child("name"))
        net = by_name.get(as_str(iface.get("name")), {})
        on_pod = is_pod_network(net)
        if sum(iface.get(key) is not None for key in _BINDING_KEYS) != 1:
            causes.append(
                invalid(
                    str(path),
                    f"logical {as_str(iface.get('name'))} interface must have exactly one binding method "
                    "or binding plugin",
                )
            )
        if iface.get("masquerade") is not None:
            if not on_pod:
                causes.append(invalid(name_path, "Masquerade interface only implemented with pod network"))
            if as_str(iface.get("macAddress")) == STATIC_MASQUERADE_BRIDGE_MAC:
                causes.append(
                    invalid(
                        str(path.child("macAddress")),
                        "The requested MAC address is reserved for the in-pod bridge. Please choose another one.",
                    )
                )
        if iface.get("bridge") is not None and on_pod and not ctx.config.permit_bridge_interface_on_pod_network:
            causes.append(
                invalid(name_path, "Bridge on pod network configuration is not enabled under kubevirt-config")
            )
        if iface.get("passtBinding") is not None:
            if not ctx.config.gate_enabled("PasstBinding"):
                causes.append(invalid(name_path, "PasstBinding feature gate is not enabled"))
            if not on_pod:
                causes.append(invalid(name_path, "PasstBinding interface only implemented with pod network"))
    return causes


def _repeats(keys: list[str]) -> list[int]:
    """Indexes of the keys an earlier entry already has."""
    seen: set[str] = set()
    found: list[int] = []
    for idx, key in enumerate(keys):
        if key in seen:
            found.append(idx)
        seen.add(key)
    return found


def _network_names_unique(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    names = [as_str(net.get("name")) for net in networks_of(spec)]
    return [
        duplicate(
            str(field.child("networks").index(idx).child("name")),
            f'Network with name "{names[idx]}" already exists, every network must have a unique name',
        )
        for idx in _repeats(names)
    ]


def _dra_networks(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    nets = networks_of(spec)
    if not any(n.get("resourceClaim") is not None for n in nets):
        return []
    nets_path = str(field.child("networks"))
    if not ctx.config.gate_enabled("NetworkDevicesWithDRA"):
        return [
            invalid(
                nets_path,
                "vmi.spec.networks contains DRA networks but NetworkDevicesWithDRA feature gate is not enabled",
            )
        ]
    if any(n.get("multus") is not None for n in nets):
        return [invalid(nets_path, "mixing Multus and DRA resourceClaim networks in the same VMI is not supported")]
    claims = {as_str(as_map(rc).get("name")) for rc in as_list(spec.get("resourceClaims"))}
    by_iface = {as_str(i.get("name")): i for i in interfaces_of(spec)}
    causes: list[Cause] = []
    seen_keys: set[str] = set()
    for idx, net in enumerate(nets):
        if net.get("resourceClaim") is None:
            continue
        name = as_str(net.get("name"))
        iface = by_iface.get(name)
        if iface is not None and iface.get("sriov") is None and iface.get("binding") is None:
            causes.append(
                invalid(
                    str(field.child("domain", "devices", "interfaces")),
                    f'DRA network "{name}" requires an SR-IOV or binding plugin interface',
                )
            )
        claim_path = field.child("networks").index(idx).child("resourceClaim")
        claim, request = (
            as_str(get(net, "resourceClaim", "claimName")),
            as_str(get(net, "resourceClaim", "requestName")),
        )
        if not claim:
            causes.append(required(str(claim_path.child("claimName")), "claimName is required for DRA network"))
        if not request:
            causes.append(required(str(claim_path.child("requestName")), "requestName is required for DRA network"))
        if not claim or not request:
            continue
        if claim not in claims:
            causes.append(
                Cause(
                    FIELD_VALUE_NOT_FOUND,
                    f'network references resourceClaim "{claim}" which is not defined in spec.resourceClaims',
                    str(claim_path.child("claimName")),
                )
            )
        key = f"{claim}/{request}"
        if key in seen_keys:
            causes.append(
                Cause(
                    FIELD_VALUE_DUPLICATE,
                    f'duplicate claimName/requestName combination "{key}"',
                    str(field.child("networks").index(idx)),
                )
            )
        seen_keys.add(key)
    return causes


def _networks_assigned_to_interfaces(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    iface_names = {as_str(i.get("name")) for i in interfaces_of(spec)}
    for idx, net in enumerate(networks_of(spec)):
        name = as_str(net.get("name"))
        if name not in iface_names:
            path = str(field.child("networks").index(idx).child("name"))
            causes.append(Cause(FIELD_VALUE_REQUIRED, f"{path} '{name}' not found.", path))
    return causes


def _interface_names_unique(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    names = [as_str(iface.get("name")) for iface in interfaces_of(spec)]
    return [
        duplicate(
            str(field.child("domain", "devices", "interfaces").index(idx).child("name")),
            "Only one interface can be connected to one specific network",
        )
        for idx in _repeats(names)
    ]


def _interfaces_assigned_to_networks(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    net_names = set(networks_by_name(spec))
    for idx, iface in enumerate(interfaces_of(spec)):
        name = as_str(iface.get("name"))
        if name not in net_names:
            path = str(field.child("domain", "devices", "interfaces").index(idx).child("name"))
            causes.append(Cause(FIELD_VALUE_INVALID, f"{path} '{name}' not found.", path))
    return causes
