"""kube-apiserver's Table printers for Services, Endpoints and EndpointSlices (pkg/printers/internalversion)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pykubevirt.apiserver.printers import AGE, NAME, Table, age_cell, column, name_cell, printed_table

SERVICE_COLUMNS = [
    NAME,
    column("Type", "The type of the service."),
    column("Cluster-IP", "The cluster IP address of the service."),
    column("External-IP", "The external IP addresses of the service."),
    column("Port(s)", "The ports the service exposes."),
    AGE,
    column("Selector", "The label selector of the pods the service routes to.", priority=1),
]
ENDPOINTS_COLUMNS = [NAME, column("Endpoints", "Endpoints of the service."), AGE]
SLICE_COLUMNS = [
    NAME,
    column("AddressType", "The type of address carried by the slice."),
    column("Ports", "The ports of the slice."),
    column("Endpoints", "The addresses of the slice's endpoints."),
    AGE,
]
# formatEndpoints and formatDiscoveryPorts show this many entries, then "+ N more...".
MAX_SHOWN = 3


def _more(items: list[str]) -> str:
    if not items:
        return "<none>"
    shown = ",".join(items[:MAX_SHOWN])
    return shown + (f" + {len(items) - MAX_SHOWN} more..." if len(items) > MAX_SHOWN else "")


def service_ports(spec: dict[str, Any]) -> str:
    """`80/TCP,22:30022/TCP` (makePortString)."""
    shown = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol") or "TCP"
        node_port = f":{port['nodePort']}" if port.get("nodePort") else ""
        shown.append(f"{port.get('port')}{node_port}/{protocol}")
    return ",".join(shown) or "<none>"


def external_ips(obj: dict[str, Any]) -> str:
    """getServiceExternalIP: externalIPs, the load balancer's ingress, or the ExternalName."""
    spec = obj.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    ips = [str(ip) for ip in spec.get("externalIPs") or []]
    if kind == "ExternalName":
        return str(spec.get("externalName") or "")
    if kind == "LoadBalancer":
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        found = [str(i.get("ip") or i.get("hostname") or "") for i in ingress] + ips
        return ",".join(found) if found else "<pending>"
    return ",".join(ips) or "<none>"


def service_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get services (-o wide adds the selector)."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        spec = obj.get("spec") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
        cluster_ip = ",".join(spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []))
        return [
            name_cell(obj),
            spec.get("type") or "ClusterIP",
            cluster_ip or "<none>",
            external_ips(obj),
            service_ports(spec),
            age_cell(obj, now),
            selector,
        ]

    return printed_table(SERVICE_COLUMNS, row, objects, now)


def endpoints_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get endpoints: `ip:port` of every ready address, by subset."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        shown = []
        for subset in obj.get("subsets") or []:
            ports = subset.get("ports") or [{}]
            for address in subset.get("addresses") or []:
                for port in ports:
                    ip = address.get("ip", "")
                    shown.append(f"{ip}:{port['port']}" if port.get("port") else ip)
        return [name_cell(obj), _more(shown), age_cell(obj, now)]

    return printed_table(ENDPOINTS_COLUMNS, row, objects, now)


def endpointslice_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get endpointslices."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        ports = [str(p.get("port")) for p in obj.get("ports") or [] if p.get("port") is not None]
        addresses = [str(a) for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
        return [
            name_cell(obj),
            obj.get("addressType") or "",
            _more(ports) if ports else "<unset>",
            _more(addresses),
            age_cell(obj, now),
        ]

    return printed_table(SLICE_COLUMNS, row, objects, now)
