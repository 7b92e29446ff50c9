"""kube-controller-manager's endpoints and endpointslice controllers, for the embedded cluster: every Service with a
selector gets an Endpoints object and an EndpointSlice listing the IPs and target ports of the pods it selects
(ready ones as addresses, the others as notReadyAddresses / ready=false).

virt-controller runs it in embedded mode only; a real cluster has its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Controller, Result, run_until_failure
from pykubevirt.client.errors import NotFound
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import ENDPOINT_SLICES, ENDPOINTS, PODS, SERVICES

log = logging.getLogger("pykubevirt.controller.endpoints")

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"


def selects(selector: Mapping[str, str], labels: Mapping[str, str] | None) -> bool:
    """A Service's selector is a plain map: every pair must be among the pod's labels."""
    labels = labels or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_ready(pod: Mapping[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def target_port(pod: Mapping[str, Any], port: Mapping[str, Any]) -> int | None:
    """FindPort: a number as it is, a name looked up among the pod's container ports of the same protocol."""
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    protocol = port.get("protocol") or "TCP"
    for container in (pod.get("spec") or {}).get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == target and (declared.get("protocol") or "TCP") == protocol:
                return int(declared["containerPort"])
    return None


def endpoint_pods(service: Mapping[str, Any], pods: list[Object]) -> list[Object]:
    """The pods a Service routes to: selected, with an IP, neither finished nor being deleted."""
    selector = (service.get("spec") or {}).get("selector") or {}
    found = []
    for pod in pods:
        status = pod.get("status") or {}
        if not selects(selector, (pod.get("metadata") or {}).get("labels")) or not status.get("podIP"):
            continue
        if status.get("phase") in ("Succeeded", "Failed") or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        found.append(pod)
    return sorted(found, key=lambda p: str(p["status"]["podIP"]))


def _resolved(service: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[tuple[str, int, str], ...]:
    ports = []
    for port in (service.get("spec") or {}).get("ports") or []:
        number = target_port(pod, port)
        if number is not None:
            ports.append((str(port.get("name") or ""), number, str(port.get("protocol") or "TCP")))
    return tuple(ports)


def _address(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    address: dict[str, Any] = {"ip": pod["status"]["podIP"]}
    if (pod.get("spec") or {}).get("nodeName"):
        address["nodeName"] = pod["spec"]["nodeName"]
    address["targetRef"] = {
        "kind": "Pod",
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    return address


def _port_list(ports: tuple[tuple[str, int, str], ...]) -> list[dict[str, Any]]:
    return [
        {**({"name": name} if name else {}), "port": number, "protocol": protocol} for name, number, protocol in ports
    ]


def desired_endpoints(service: Mapping[str, Any], pods: list[Object]) -> dict[str, Any]:
    """The Endpoints of a Service: one subset per distinct set of resolved ports (kube's RepackSubsets)."""
    groups: dict[tuple[tuple[str, int, str], ...], dict[str, list[dict[str, Any]]]] = {}
    for pod in endpoint_pods(service, pods):
        ports = _resolved(service, pod)
        if not ports:
            continue
        group = groups.setdefault(ports, {"addresses": [], "notReadyAddresses": []})
        group["addresses" if pod_ready(pod) else "notReadyAddresses"].append(_address(pod))
    subsets = []
    for ports, group in groups.items():
        subset: dict[str, Any] = {k: v for k, v in group.items() if v}
        subset["ports"] = _port_list(ports)
        subsets.append(subset)
    meta = service["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {})},
        "subsets": subsets,
    }


def slice_name(service: Mapping[str, Any]) -> str:
    meta = service["metadata"]
    return f"{meta['name'][:57]}-{hashlib.sha256(str(meta.get('uid')).encode()).hexdigest()[:5]}"


def desired_slice(service: Mapping[str, Any], pods: list[Object]) -> dict[str, Any]:
    """The Service's EndpointSlice (one: this cluster's Services stay far below the 100-endpoint slice limit)."""
    meta = service["metadata"]
    endpoints = []
    port_sets = set()
    for pod in endpoint_pods(service, pods):
        ports = _resolved(service, pod)
        if not ports:
            continue
        port_sets.add(ports)
        address = _address(pod)
        ready = pod_ready(pod)
        endpoint: dict[str, Any] = {
            "addresses": [address["ip"]],
            "conditions": {"ready": ready, "serving": ready, "terminating": False},
            "targetRef": address["targetRef"],
        }
        if "nodeName" in address:
            endpoint["nodeName"] = address["nodeName"]
        endpoints.append(endpoint)
    ports = sorted(port_sets)[0] if port_sets else ()
    owner = {
        "apiVersion": "v1",
        "kind": "Service",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    labels = {**(meta.get("labels") or {}), SERVICE_NAME_LABEL: meta["name"], MANAGED_BY_LABEL: MANAGED_BY}
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name(service),
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner],
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": _port_list(ports),
    }


class EndpointsController:
    """Keeps Endpoints and EndpointSlices in step with Services and their pods."""

    def __init__(self, client: KubeClient, *, workers: int = 2) -> None:
        self.client = client
        self.services = Informer(client, SERVICES)
        self.pods = Informer(client, PODS)
        self.controller = Controller("endpoints", self, workers=workers).watch(self.services)
        self.controller.watch(self.pods, self._services_of)

    def _services_of(self, pod: Object) -> list[str]:
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace")
        return [
            object_key(service)
            for service in self.services.items()
            if service["metadata"].get("namespace") == namespace
            and selects((service.get("spec") or {}).get("selector") or {}, meta.get("labels"))
        ]

    async def reconcile(self, key: str) -> Result | None:
        namespace, name = key.split("/", 1)
        service = self.services.get(key)
        if service is None:
            # The slice is owned by the Service (the garbage collector removes it); Endpoints are not.
            try:
                await self.client.delete(ENDPOINTS, name, namespace)
            except NotFound:
                pass
            return None
        if not (service.get("spec") or {}).get("selector"):
            return None  # endpoints of a Service without a selector are the user's
        pods = [p for p in self.pods.items() if (p.get("metadata") or {}).get("namespace") == namespace]
        await self._apply(ENDPOINTS, desired_endpoints(service, pods), ("subsets",))
        await self._apply(ENDPOINT_SLICES, desired_slice(service, pods), ("endpoints", "ports", "addressType"))
        return None

    async def _apply(self, resource: Any, desired: dict[str, Any], fields: tuple[str, ...]) -> None:
        meta = desired["metadata"]
        try:
            current = await self.client.get(resource, meta["name"], meta["namespace"])
        except NotFound:
            # Created concurrently: AlreadyExists fails this reconcile, which is retried.
            await self.client.create(resource, desired, meta["namespace"])
            return
        same = all(current.get(f) == desired.get(f) for f in fields)
        if same and (current["metadata"].get("labels") or {}) == meta["labels"]:
            return
        body = copy_json(current)
        for field in fields:
            body[field] = desired[field]
        body["metadata"]["labels"] = meta["labels"]
        await self.client.update(resource, body)

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.services.run(), name="informer-services"),
            asyncio.create_task(self.pods.run(), name="informer-pods-endpoints"),
            asyncio.create_task(self.controller.run(), name="endpoints-controller"),
        ]
        await run_until_failure(tasks)
