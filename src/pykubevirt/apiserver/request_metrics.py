"""kube-apiserver's request and storage metrics, served at GET /metrics (which needs a token, as the API does).

`apiserver_request_total` and `apiserver_request_duration_seconds` carry kube-apiserver's labels (verb, dry_run,
group, version, resource, subresource, scope, component, and code for the count), the verb reported as
kube-apiserver's metrics report it (LIST, WATCH, APPLY, DELETECOLLECTION, CONNECT…). `apiserver_storage_objects`
counts the stored objects per resource. Long-running requests (watches and connections) are counted when they end
and stay out of the latency histogram, whose buckets are kube-apiserver's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pykubevirt.apiserver import query_options
from pykubevirt.apiserver.store import Store
from pykubevirt.metrics.exposition import CONTENT_TYPE_LATEST
from pykubevirt.metrics.label_children import LabelChildren

COMPONENT = "apiserver"
APPLY_PATCH = "application/apply-patch+yaml"
# Subresources kube-apiserver serves as connections (its CONNECT verb); KubeVirt's console, vnc and portforward too.
CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward", "proxy", "console", "vnc", "usbredir"})
# Non-resource paths reported by name (as kube-apiserver does for its health checks); others are left out.
NAMED_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/metrics", "/version", "/openapi/v2", "/openapi/v3"})
LABELS = ("verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component")
BUCKETS = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0,
    30.0, 45.0, 60.0,
)  # fmt: skip


@dataclass(frozen=True)
class RequestLabels:
    verb: str
    dry_run: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    scope: str = ""

    @property
    def long_running(self) -> bool:
        return self.verb in ("WATCH", "CONNECT")

    def values(self) -> tuple[str, ...]:
        fields = (self.verb, self.dry_run, self.group, self.version, self.resource, self.subresource, self.scope)
        return (*fields, COMPONENT)


def request_labels(method: str, path: str, query: Mapping[str, str], content_type: str = "") -> RequestLabels | None:
    """A request's labels as kube-apiserver's metrics give them; None for a non-resource path not reported."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, tail = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, tail = parts[1], parts[2], parts[3:]
    else:
        return RequestLabels(method) if path in NAMED_PATHS else None
    if not tail:
        # Discovery of a group version: a non-resource request.
        return None
    watch_path = tail[0] == "watch"
    if watch_path:
        tail = tail[1:]
    namespaced = len(tail) >= 3 and tail[0] == "namespaces"
    rest = tail[2:] if namespaced else tail
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    scope = "resource" if name else "namespace" if namespaced else "cluster"
    if subresource in CONNECT_SUBRESOURCES:
        verb = "CONNECT"
    elif method == "GET":
        verb = "WATCH" if watch_path or query_options.boolean_parameter(query, "watch") else "GET" if name else "LIST"
    elif method == "PATCH":
        verb = "APPLY" if content_type == APPLY_PATCH else "PATCH"
    elif method == "DELETE":
        verb = "DELETE" if name else "DELETECOLLECTION"
    else:
        verb = method
    dry_run = "All" if query.get("dryRun") == "All" else ""
    return RequestLabels(verb, dry_run, group, version, resource, subresource, scope)


def storage_resource(collection: str) -> str:
    """A store collection by kube's resource name: `core/pods` is pods, `kubevirt.io/vms` is vms.kubevirt.io."""
    group, _, plural = collection.partition("/")
    return plural if group == "core" else f"{plural}.{group}"


class _StorageObjects(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "apiserver_storage_objects",
            "Number of stored objects at the time of last check split by kind.",
            labels=["resource"],
        )
        for collection in sorted(self.store.collections()):
            family.add_metric([storage_resource(collection)], self.store.count(collection))
        yield family


class RequestMetrics:
    """This API server's registry: its requests, its stored objects and the process collectors."""

    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "apiserver_request_total",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, "
            "component, and HTTP response code.",
            [*LABELS, "code"],
            registry=self.registry,
        )
        self.durations = Histogram(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, "
            "subresource, scope and component.",
            list(LABELS),
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StorageObjects(store))
        self._counts = LabelChildren(self.requests)
        self._latencies = LabelChildren(self.durations)

    def observe(self, labels: RequestLabels, code: int, seconds: float) -> None:
        values = labels.values()
        self._counts(*values, str(code)).inc()
        if not labels.long_running:
            self._latencies(*values).observe(seconds)

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        labels = request_labels(
            request.method, request.path, request.query, request.headers.get("Content-Type", "").split(";")[0]
        )
        began = time.monotonic()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            if labels is not None:
                self.observe(labels, code, time.monotonic() - began)

    async def serve(self, request: web.Request) -> web.Response:
        """GET /metrics: this server's metrics and the process' (CPU, memory, file descriptors)."""
        body = generate_latest(self.registry) + generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
