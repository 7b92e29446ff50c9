"""REST client metrics as KubeVirt exports client-go's (`kubevirt_rest_client_*`).

Requests are counted by status code, method and host; latency and the client-side rate limiter's delay are
histograms by verb and URL, the URL with its namespace and name replaced by `{namespace}` and `{name}` as
client-go's request template does, so the label's values stay few.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram

from pykubevirt.metrics.label_children import LabelChildren

# client-go's request latency buckets (seconds).
BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

REQUESTS = Counter(
    "kubevirt_rest_client_requests",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
)
LATENCY = Histogram(
    "kubevirt_rest_client_request_latency_seconds",
    "Request latency in seconds. Broken down by verb and URL.",
    ["verb", "url"],
    buckets=BUCKETS,
)
RATE_LIMITER = Histogram(
    "kubevirt_rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds. Broken down by verb and URL.",
    ["verb", "url"],
    buckets=BUCKETS,
)
_REQUESTS = LabelChildren(REQUESTS)
_LATENCY = LabelChildren(LATENCY)
_RATE_LIMITER = LabelChildren(RATE_LIMITER)


def url_template(server: str, path: str) -> str:
    """`server` + `path` with the namespace and object name replaced: …/namespaces/{namespace}/pods/{name}/status."""
    parts = path.partition("?")[0].strip("/").split("/")
    # /api/v1/... or /apis/<group>/<version>/...: the resource path begins after the group version.
    start = 2 if parts[:1] == ["api"] else 3 if parts[:1] == ["apis"] else len(parts)
    rest = parts[start:]
    if len(rest) >= 2 and rest[0] == "namespaces":
        rest[1] = "{namespace}"
        resource_at = 2
    else:
        resource_at = 0
    if len(rest) > resource_at + 1:
        rest[resource_at + 1] = "{name}"
    return server.rstrip("/") + "/" + "/".join([*parts[:start], *rest])


def observe(server: str, method: str, path: str, code: str, seconds: float, waited: float) -> None:
    """One request: its answer's code (or `<error>` when none came), its time and its wait for the rate limiter."""
    url = url_template(server, path)
    _REQUESTS(code, method, _host(server)).inc()
    _LATENCY(method, url).observe(seconds)
    _RATE_LIMITER(method, url).observe(waited)


@lru_cache(maxsize=64)
def _host(server: str) -> str:
    return urlsplit(server).netloc
