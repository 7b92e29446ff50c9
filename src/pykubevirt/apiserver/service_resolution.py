"""Where a Service reference of a webhook or APIService leads: a ready endpoint of the Service, as kube-apiserver
resolves it with --enable-aggregator-routing (the embedded server has no cluster network to reach ClusterIPs).

The TLS server name is the Service's DNS name, `<name>.<namespace>.svc`, which the backend's certificate must carry.
"""

from __future__ import annotations

import base64
import binascii
import ssl
from dataclasses import dataclass
from typing import Any

from pykubevirt.apiserver.store import Store

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


class ResolutionError(Exception):
    """The Service or its endpoints cannot be found (the message is kube-apiserver's)."""


@dataclass(frozen=True, slots=True)
class Backend:
    """An address to dial and the name its certificate must carry."""

    host: str
    port: int
    server_name: str

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _service_port(service: dict[str, Any], port: int) -> dict[str, Any]:
    for entry in (service.get("spec") or {}).get("ports") or []:
        if int(entry.get("port") or 0) == port:
            return dict(entry)
    name = service["metadata"]["name"]
    raise ResolutionError(f'service "{name}" has no port {port}')


def _from_slices(store: Store, namespace: str, name: str, port_name: str) -> tuple[str, int] | None:
    for record in store.records("discovery.k8s.io/endpointslices", f"{namespace}/"):
        labels = (record.value.get("metadata") or {}).get("labels") or {}
        if labels.get(SERVICE_NAME_LABEL) != name:
            continue
        ports = [p for p in record.value.get("ports") or [] if (p.get("name") or "") == port_name]
        if not ports:
            continue
        for endpoint in record.value.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                return str(address), int(ports[0]["port"])
    return None


def _from_endpoints(store: Store, namespace: str, name: str, port_name: str) -> tuple[str, int] | None:
    record = store.get("core/endpoints", f"{namespace}/{name}")
    for subset in (record.value.get("subsets") or []) if record is not None else []:
        ports = [p for p in subset.get("ports") or [] if (p.get("name") or "") == port_name]
        for address in subset.get("addresses") or []:
            if ports and address.get("ip"):
                return str(address["ip"]), int(ports[0]["port"])
    return None


def resolve_service(store: Store, namespace: str, name: str, port: int) -> Backend:
    """A ready endpoint of Service `namespace/name` for its port `port`."""
    record = store.get("core/services", f"{namespace}/{name}")
    if record is None:
        raise ResolutionError(f'service "{name}" not found')
    port_name = str(_service_port(record.value, port).get("name") or "")
    found = _from_slices(store, namespace, name, port_name) or _from_endpoints(store, namespace, name, port_name)
    if found is None:
        raise ResolutionError(f'no endpoints available for service "{name}"')
    return Backend(found[0], found[1], f"{name}.{namespace}.svc")


def ca_bundle_context(ca_bundle: str | None, *, insecure: bool = False) -> ssl.SSLContext:
    """A client context trusting `caBundle` (base64 PEM), or the system's roots when it is empty."""
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if not ca_bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ResolutionError(f"caBundle is not base64-encoded PEM: {exc}") from exc
    try:
        return ssl.create_default_context(cadata=pem)
    except ssl.SSLError as exc:
        raise ResolutionError(f"caBundle holds no usable certificate: {exc}") from exc
