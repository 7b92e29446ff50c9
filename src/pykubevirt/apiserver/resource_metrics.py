"""`metrics.k8s.io/v1beta1` served in-process, as metrics-server serves it on a cluster: NodeMetrics and PodMetrics,
what `kubectl top` reads, made from the nodes' resource metrics (the kubelet's `GET /metrics/resource`).

metrics-server scrapes every node every 15 s and answers with the rate between its last two scrapes. Here a node is
scraped when someone asks about it and its last scrape is older than that. The first time it is scraped twice, a
second apart, so `kubectl top` answers at once. CPU is the rate of the cumulative seconds between the two scrapes
(nanocores); memory is the working set of the later one (Ki).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from pykubevirt.api import errors
from pykubevirt.api.label_selectors import parse_label_selector
from pykubevirt.api.timestamps import format_time, parse_time
from pykubevirt.apiserver.http_api import error_response, json_response
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.pod_logs import node_endpoint
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.apiserver.selectors import FieldSelector, parse_field_selector

log = logging.getLogger("pykubevirt.apiserver.resource_metrics")

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
RESOLUTION_SECONDS = 15.0  # metrics-server's --metric-resolution
FIRST_WINDOW_SECONDS = 1.0
STALE_SECONDS = 300.0  # a scrape this old is no start for a rate
SCRAPE_TIMEOUT_SECONDS = 5.0

ContainerKey = tuple[str, str, str]  # namespace, pod, container


def resource_list() -> dict[str, Any]:
    """The group-version's APIResourceList, as metrics-server registers it."""
    resources = [
        {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": ["get", "list"]},
        {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": ["get", "list"]},
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION, "resources": resources}


@dataclass(frozen=True, slots=True)
class Scrape:
    """One read of a node's resource metrics: (cumulative CPU seconds, working-set bytes) of the node and containers."""

    at: float
    node: tuple[float, int]
    containers: dict[ContainerKey, tuple[float, int]]
    by_pod: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # the containers of each pod, in order


def parse_scrape(text: str, received_at: float) -> Scrape:
    """The series metrics-server reads from the kubelet's text; a sample's own timestamp wins over `received_at`."""
    cpu: dict[ContainerKey, float] = {}
    memory: dict[ContainerKey, int] = {}
    node_cpu, node_memory, at = math.nan, 0, received_at
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.timestamp is not None:
                at = float(sample.timestamp)
            labels = sample.labels
            key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
            if sample.name == "container_cpu_usage_seconds_total":
                cpu[key] = sample.value
            elif sample.name == "container_memory_working_set_bytes":
                memory[key] = int(sample.value)
            elif sample.name == "node_cpu_usage_seconds_total":
                node_cpu = sample.value
            elif sample.name == "node_memory_working_set_bytes":
                node_memory = int(sample.value)
    if math.isnan(node_cpu):
        raise ValueError("no node_cpu_usage_seconds_total in the node's resource metrics")
    containers = {key: (seconds, memory.get(key, 0)) for key, seconds in cpu.items()}
    by_pod: dict[tuple[str, str], list[str]] = {}
    for namespace, pod, container in containers:
        by_pod.setdefault((namespace, pod), []).append(container)
    return Scrape(at, (node_cpu, node_memory), containers, by_pod)


def usage(before: tuple[float, int], after: tuple[float, int], seconds: float) -> dict[str, str]:
    """CPU as the rate between two cumulative readings (never below zero: a restart resets the counter), memory as the
    later working set, in metrics-server's units."""
    nanocores = max(0, round((after[0] - before[0]) / seconds * 1e9)) if seconds > 0 else 0
    return {"cpu": f"{nanocores}n", "memory": f"{after[1] // 1024}Ki"}


def go_duration(seconds: float) -> str:
    """A metav1.Duration as Go prints it ("15.004s", "1m5.5s"), to the millisecond."""
    minutes, rest = divmod(round(seconds * 1000) / 1000, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


def rfc3339(at: float) -> str:
    return format_time(datetime.fromtimestamp(at, UTC))


@dataclass(slots=True)
class _NodeScrapes:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    previous: Scrape | None = None
    latest: Scrape | None = None


class ResourceMetrics:
    """The handler of the group, and each node's last two scrapes."""

    def __init__(self, api: ObjectAPI, credential: Callable[[], str]) -> None:
        self.api = api
        self.credential = credential  # the API server's own token, which the nodes allow `get nodes/metrics`
        self.scrapes: dict[str, _NodeScrapes] = {}
        self.nodes = api.registry.builtin("", "v1", "nodes")
        self.pods = api.registry.builtin("", "v1", "pods")

    async def handle(self, request: web.Request, user: UserInfo) -> web.StreamResponse:
        try:
            if request.method != "GET":
                raise errors.method_not_allowed(request.method)
            parts = [p for p in request.path.split("/") if p][3:]
            selector = parse_label_selector(request.query.get("labelSelector", ""))
            fields = parse_field_selector(request.query.get("fieldSelector", ""))
            if parts == ["nodes"]:
                return json_response(await self._node_list(selector.matches, fields))
            if len(parts) == 2 and parts[0] == "nodes":
                return json_response(await self._node(parts[1]))
            if parts == ["pods"] or (len(parts) == 3 and parts[0] == "namespaces" and parts[2] == "pods"):
                namespace = parts[1] if len(parts) == 3 else None
                return json_response(await self._pod_list(namespace, selector.matches, fields))
            if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "pods":
                return json_response(await self._pod(parts[1], parts[3]))
            raise errors.resource_not_found()
        except errors.APIError as exc:
            return error_response(exc)
        except ValueError as exc:  # a selector kube would not parse
            return error_response(errors.bad_request(str(exc)))

    # ------------------------------------------------------------------------------------------------- nodes

    async def _node_list(self, matches: Callable[[dict[str, Any]], bool], fields: FieldSelector) -> dict[str, Any]:
        listed = self.api.list_objects(self.nodes, None, field_selector=fields)[0]
        nodes = [n for n in listed if matches(n.get("metadata", {}).get("labels"))]
        pairs = await asyncio.gather(*(self._pair(node) for node in nodes))
        items = [self._node_item(node, pair) for node, pair in zip(nodes, pairs, strict=True) if pair is not None]
        return {"kind": "NodeMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}

    async def _node(self, name: str) -> dict[str, Any]:
        node = self.api.find(self.nodes, None, name)
        pair = await self._pair(node) if node is not None else None
        if node is None or pair is None:
            raise errors.not_found("nodemetrics", GROUP, name)
        return {"kind": "NodeMetrics", "apiVersion": API_VERSION, **self._node_item(node, pair)}

    def _node_item(self, node: dict[str, Any], pair: tuple[Scrape, Scrape]) -> dict[str, Any]:
        before, after = pair
        return {
            **self._meta(node, None),
            "timestamp": rfc3339(after.at),
            "window": go_duration(after.at - before.at),
            "usage": usage(before.node, after.node, after.at - before.at),
        }

    # -------------------------------------------------------------------------------------------------- pods

    async def _pod_list(
        self, namespace: str | None, matches: Callable[[dict[str, Any]], bool], fields: FieldSelector
    ) -> dict[str, Any]:
        listed = self.api.list_objects(self.pods, namespace, field_selector=fields)[0]
        pods = [p for p in listed if matches(p["metadata"].get("labels"))]
        items = [item for item in await self._pod_items(pods) if item is not None]
        return {"kind": "PodMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}

    async def _pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.api.find(self.pods, namespace, name)
        item = (await self._pod_items([pod]))[0] if pod is not None else None
        if item is None:
            raise errors.not_found("podmetrics", GROUP, f"{namespace}/{name}")
        return {"kind": "PodMetrics", "apiVersion": API_VERSION, **item}

    async def _pod_items(self, pods: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """Each running pod's metrics (None for the others), from one pair of scrapes of each of their nodes."""
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running" and _node_name(p)]
        newest: dict[str, float] = {}
        for pod in running:
            started = parse_time((pod.get("status") or {}).get("startTime"))
            # startTime is to the second: a pod counts as started up to a second after it.
            at = started.timestamp() + 1.0 if started is not None else 0.0
            newest[_node_name(pod)] = max(newest.get(_node_name(pod), 0.0), at)
        nodes = {name: self.api.find(self.nodes, None, name) for name in newest}
        names = [name for name, node in nodes.items() if node is not None]
        pairs = await asyncio.gather(*(self._pair(nodes[name] or {}, since=newest[name]) for name in names))
        by_node = dict(zip(names, pairs, strict=True))
        measured = {id(pod) for pod in running}
        return [self._pod_item(pod, by_node.get(_node_name(pod))) if id(pod) in measured else None for pod in pods]

    def _pod_item(self, pod: dict[str, Any], pair: tuple[Scrape, Scrape] | None) -> dict[str, Any] | None:
        """The pod's metrics: each container the node reports in both scrapes (its sidecars too, as the kubelet's
        metrics have them); None when there is none."""
        if pair is None:
            return None
        before, after = pair
        meta = pod["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        containers = []
        for container in after.by_pod.get((namespace, name), []):
            key = (namespace, name, container)
            if key in before.containers:
                seconds = after.at - before.at
                used = usage(before.containers[key], after.containers[key], seconds)
                containers.append({"name": key[2], "usage": used})
        if not containers:
            return None
        stamps = {"timestamp": rfc3339(after.at), "window": go_duration(after.at - before.at)}
        return {**self._meta(pod, meta["namespace"]), **stamps, "containers": containers}

    # --------------------------------------------------------------------------------------------- scraping

    @staticmethod
    def _meta(obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": obj["metadata"]["name"], "creationTimestamp": rfc3339(time.time())}
        if namespace is not None:
            meta["namespace"] = namespace
        if obj["metadata"].get("labels"):
            meta["labels"] = obj["metadata"]["labels"]
        return {"metadata": meta}

    async def _pair(self, node: dict[str, Any], since: float = 0.0) -> tuple[Scrape, Scrape] | None:
        """The node's last two scrapes (None: unreachable), scraping now when the last is older than the resolution,
        and twice when it is older than `since` (a pod started after it, which neither scrape would have)."""
        name = str(node["metadata"]["name"])
        state = self.scrapes.setdefault(name, _NodeScrapes())
        async with state.lock:
            now = time.time()
            if state.latest is None or now - state.latest.at >= RESOLUTION_SECONDS or state.latest.at < since:
                try:
                    fresh = await self._scrape(node)
                    if state.latest is None or now - state.latest.at > STALE_SECONDS or state.latest.at < since:
                        await asyncio.sleep(FIRST_WINDOW_SECONDS)
                        state.latest, fresh = fresh, await self._scrape(node)
                except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                    log.warning("could not scrape the resource metrics of node %s: %s", name, exc)
                    return None
                state.previous, state.latest = state.latest, fresh
            if state.previous is None or state.latest is None or state.latest.at <= state.previous.at:
                return None
            return state.previous, state.latest

    async def _scrape(self, node: dict[str, Any]) -> Scrape:
        address = node_endpoint(node)
        if address is None:
            raise ValueError("the node publishes no kubelet endpoint")
        url = f"http://{address[0]}:{address[1]}/metrics/resource"
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_SECONDS)
        headers = {"Authorization": f"Bearer {self.credential()}"}
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            async with session.get(url) as answer:
                if answer.status != 200:
                    raise ValueError(f"the node answered HTTP {answer.status}: {(await answer.text()).strip()}")
                return parse_scrape(await answer.text(), time.time())


def _node_name(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def install(extra_groups: dict[tuple[str, str], Any], api: ObjectAPI, credential: Callable[[], str]) -> None:
    """Serve the group among the server's in-process API groups, scraping the nodes with `credential`."""
    extra_groups[(GROUP, VERSION)] = (ResourceMetrics(api, credential).handle, resource_list())
