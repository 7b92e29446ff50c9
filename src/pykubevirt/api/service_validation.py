"""Services as kube-apiserver defaults, validates and allocates them (pkg/apis/core/{v1/defaults,validation},
pkg/registry/core/service/{storage,ipallocator,portallocator}); pure: the caller passes what is already taken.

Only IPv4 single-stack clusters are served: every Service gets one family, IPv4.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import causes
from pykubevirt.api.causes import Cause
from pykubevirt.api.name_validation import dns1123_label_errors

# kube-apiserver's --service-cluster-ip-range default (DefaultServiceIPCIDR) and --service-node-port-range.
DEFAULT_SERVICE_CIDR = "10.0.0.0/24"
NODE_PORT_RANGE = (30000, 32767)
TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
PROTOCOLS = ("SCTP", "TCP", "UDP")
AFFINITIES = ("ClientIP", "None")
POLICIES = ("Cluster", "Local")
HEADLESS = "None"
PORT_RANGE = "must be between 1 and 65535, inclusive"
IP_FORMAT = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"


class AllocationError(Exception):
    """No ClusterIP or node port could be given (the 422 or 500 kube answers)."""

    def __init__(self, cause: Cause | None, message: str = "") -> None:
        super().__init__(message or (cause.message if cause else ""))
        self.cause = cause


def _quote(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def _go_value(value: Any) -> str:
    """A field value as kube 1.32 prints it in an Invalid cause: strings quoted, lists as JSON."""
    if isinstance(value, list):
        return json.dumps(value, separators=(",", ":"))
    return _quote(value)


def _invalid(path: str, value: Any, detail: str) -> Cause:
    return causes.invalid(path, f"Invalid value: {_go_value(value)}: {detail}")


def _unsupported(path: str, value: Any, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(_quote(s) for s in supported)
    return causes.not_supported(path, f"Unsupported value: {_quote(value)}: supported values: {listed}")


def _required(path: str) -> Cause:
    return causes.required(path, "Required value")


def service_type(spec: Mapping[str, Any]) -> str:
    return str(spec.get("type") or "ClusterIP")


def ports_of(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """spec.ports; a null entry decodes as Go's zero ServicePort, an empty object."""
    ports = spec.get("ports") or []
    return [port if isinstance(port, dict) else {} for port in ports] if isinstance(ports, list) else []


def is_headless(spec: Mapping[str, Any]) -> bool:
    return spec.get("clusterIP") == HEADLESS


def default_service(service: dict[str, Any]) -> None:
    """SetDefaults_Service and the REST strategy's defaults (families and policy are set at allocation)."""
    if not isinstance(service.get("spec"), dict):
        service["spec"] = {}
    spec = service["spec"]
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    kind = service_type(spec)
    if isinstance(spec.get("ports"), list):
        spec["ports"] = ports_of(spec)
    for port in ports_of(spec):
        port.setdefault("protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    if kind != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if kind == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    if spec.get("clusterIP") and not spec.get("clusterIPs"):
        spec["clusterIPs"] = [spec["clusterIP"]]
    if not isinstance(service.get("status"), dict):
        service["status"] = {}
    service["status"].setdefault("loadBalancer", {})


def _port_causes(spec: Mapping[str, Any]) -> list[Cause]:
    found: list[Cause] = []
    ports = ports_of(spec)
    names: set[str] = set()
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        name = str(port.get("name") or "")
        if len(ports) > 1 and not name:
            found.append(_required(f"{path}.name"))
        elif name:
            found.extend(_invalid(f"{path}.name", name, e) for e in dns1123_label_errors(name))
            if name in names:
                found.append(causes.duplicate(f"{path}.name", f"Duplicate value: {_quote(name)}"))
            names.add(name)
        number = port.get("port")
        if not isinstance(number, int) or not 0 < number < 65536:
            found.append(_invalid(f"{path}.port", number, PORT_RANGE))
        protocol = port.get("protocol")
        if protocol not in PROTOCOLS:
            found.append(_unsupported(f"{path}.protocol", protocol, PROTOCOLS))
        target = port.get("targetPort")
        if isinstance(target, int) and not 0 < target < 65536:
            found.append(_invalid(f"{path}.targetPort", target, PORT_RANGE))
        elif isinstance(target, str) and not any(ch.isalpha() for ch in target):
            found.append(_invalid(f"{path}.targetPort", target, "must contain at least one letter (a-z)"))
        node_port = port.get("nodePort")
        if node_port and service_type(spec) not in ("NodePort", "LoadBalancer"):
            found.append(causes.forbidden(f"{path}.nodePort", "Forbidden: may not be used when `type` is 'ClusterIP'"))
    return found


def validate_service(service: Mapping[str, Any]) -> list[Cause]:
    """ValidateService, for the fields this cluster serves."""
    spec = service.get("spec") or {}
    found: list[Cause] = []
    kind = service_type(spec)
    if kind not in TYPES:
        found.append(_unsupported("spec.type", kind, TYPES))
    if kind == "ExternalName":
        if not spec.get("externalName"):
            found.append(_required("spec.externalName"))
    elif not spec.get("ports") and not is_headless(spec):
        found.append(_required("spec.ports"))
    found.extend(_port_causes(spec))
    affinity = spec.get("sessionAffinity")
    if affinity not in AFFINITIES:
        found.append(_unsupported("spec.sessionAffinity", affinity, AFFINITIES))
    for field in ("internalTrafficPolicy", "externalTrafficPolicy"):
        if spec.get(field) is not None and spec[field] not in POLICIES:
            found.append(_unsupported(f"spec.{field}", spec[field], POLICIES))
    cluster_ips = spec.get("clusterIPs") or []
    for i, address in enumerate(cluster_ips):
        if address != HEADLESS and not _is_ip(address):
            found.append(_invalid(f"spec.clusterIPs[{i}]", address, IP_FORMAT))
    if spec.get("clusterIP") and cluster_ips and cluster_ips[0] != spec["clusterIP"]:
        found.append(_invalid("spec.clusterIPs", cluster_ips, "element [0] must match clusterIP"))
    if is_headless(spec) and kind != "ClusterIP":
        found.append(_invalid("spec.clusterIPs[0]", HEADLESS, f"may not be set to 'None' for {kind} services"))
    return found


def _is_ip(value: Any) -> bool:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


def keep_allocated(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """patchAllocatedValues: an update that leaves out the ClusterIP (or node ports) keeps the allocated ones."""
    spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
    if service_type(spec) == "ExternalName":
        return
    if not spec.get("clusterIP") and not spec.get("clusterIPs"):
        for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if field in old_spec:
                spec[field] = old_spec[field]
    old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort") for p in ports_of(old_spec)}
    if service_type(spec) in ("NodePort", "LoadBalancer"):
        for port in ports_of(spec):
            if not port.get("nodePort") and old_ports.get((port.get("port"), port.get("protocol"))):
                port["nodePort"] = old_ports[(port.get("port"), port.get("protocol"))]


def validate_service_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateServiceUpdate: a primary ClusterIP may not change (unless to or from ExternalName)."""
    found = validate_service(new)
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    if "ExternalName" in (service_type(spec), service_type(old_spec)):
        return found
    new_ips, old_ips = spec.get("clusterIPs") or [], old_spec.get("clusterIPs") or []
    if old_ips and (not new_ips or new_ips[0] != old_ips[0]):
        found.append(_invalid("spec.clusterIPs[0]", new_ips, "may not change once set"))
    return found


def allocate_cluster_ip(spec: dict[str, Any], cidr: str, taken: set[str]) -> str:
    """Give the Service its ClusterIP (the one asked for, if free and in range), families and policy; the IP given
    ("" for headless and ExternalName services)."""
    if service_type(spec) == "ExternalName":
        return ""
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if is_headless(spec):
        spec["clusterIPs"] = [HEADLESS]
        return ""
    network = ipaddress.IPv4Network(cidr)
    wanted = str(spec.get("clusterIP") or "")
    if wanted:
        if ipaddress.ip_address(wanted) not in network:
            detail = (
                f"failed to allocate IP {wanted}: provided IP is not in the valid range. "
                f"The range of valid IPs is {cidr}"
            )
            raise AllocationError(_invalid("spec.clusterIPs", [wanted], detail))
        if wanted in taken:
            detail = f"failed to allocate IP {wanted}: provided IP is already allocated"
            raise AllocationError(_invalid("spec.clusterIPs", [wanted], detail))
        chosen = wanted
    else:
        # The first address is the `kubernetes` Service's in a real cluster: never handed out.
        hosts = list(network.hosts())[1:]
        free = next((str(ip) for ip in hosts if str(ip) not in taken), "")
        if not free:
            raise AllocationError(None, f"failed to allocate a serviceIP: range is full (service CIDR {cidr})")
        chosen = free
    spec["clusterIP"] = chosen
    spec["clusterIPs"] = [chosen]
    return chosen


def allocate_node_ports(spec: dict[str, Any], taken: set[int]) -> list[int]:
    """Node ports for NodePort and LoadBalancer Services; the ports given."""
    if service_type(spec) not in ("NodePort", "LoadBalancer"):
        return []
    if service_type(spec) == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is False:
        return []
    low, high = NODE_PORT_RANGE
    ports = ports_of(spec)
    # Ports asked for are reserved before any is chosen, so a chosen one never takes an asked-for one.
    for i, port in enumerate(ports):
        wanted = port.get("nodePort")
        if not wanted:
            continue
        if not low <= wanted <= high:
            detail = f"provided port is not in the valid range. The range of valid ports is {low}-{high}"
            raise AllocationError(_invalid(f"spec.ports[{i}].nodePort", wanted, detail))
        if wanted in taken:
            raise AllocationError(_invalid(f"spec.ports[{i}].nodePort", wanted, "provided port is already allocated"))
        taken.add(int(wanted))
    for port in ports:
        if not port.get("nodePort"):
            chosen = next((p for p in range(low, high + 1) if p not in taken), 0)
            if not chosen:
                raise AllocationError(None, "failed to allocate a nodePort: range is full")
            port["nodePort"] = chosen
            taken.add(chosen)
    return [int(port["nodePort"]) for port in ports]
