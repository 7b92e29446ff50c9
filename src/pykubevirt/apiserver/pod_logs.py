"""`pods/log`: find the pod's node and stream its container log from the node's log endpoint, as kube-apiserver
proxies to the kubelet. The node is reached at its InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from pykubevirt.api import errors
from pykubevirt.apiserver.http_api import RestHandlers, Target
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import UserInfo

log = logging.getLogger("pykubevirt.apiserver.pod_logs")

# The PodLogOptions the node understands; anything else is not passed on.
FORWARDED_OPTIONS = ("follow", "previous", "timestamps", "tailLines", "limitBytes", "sinceSeconds", "sinceTime")
CONNECT_TIMEOUT_SECONDS = 5.0


def _names(containers: list[dict[str, Any]]) -> str:
    return "[" + " ".join(str(c.get("name")) for c in containers) + "]"


def pick_container(pod: dict[str, Any], requested: str) -> str:
    """The container to read: the requested one, or the only one; kube-apiserver's messages otherwise."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or [])
    init_containers = list(spec.get("initContainers") or [])
    if not requested:
        if len(containers) == 1:
            return str(containers[0].get("name"))
        message = f"a container name must be specified for pod {name}, choose one of: {_names(containers)}"
        if init_containers:
            message += f" or one of the init containers: {_names(init_containers)}"
        raise errors.bad_request(message)
    known = {str(c.get("name")) for c in [*containers, *init_containers, *(spec.get("ephemeralContainers") or [])]}
    if requested not in known:
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def requested_pod(api: ObjectAPI, request: web.Request, target: Target, methods: tuple[str, ...]) -> dict[str, Any]:
    """The pod a request to one of its node-served subresources (log, exec, port-forward) names: 405 for another
    method, 404 without a name or a pod."""
    if request.method not in methods:
        raise errors.method_not_allowed(request.method)
    if not target.name or target.namespace is None:
        raise errors.resource_not_found()
    return api.get(target.resource, target.namespace, target.name)


def node_endpoint(node: dict[str, Any]) -> tuple[str, int] | None:
    status = node.get("status") or {}
    address = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    if not address or not port:
        return None
    return str(address), int(port)


def kubelet_url(api: ObjectAPI, pod: dict[str, Any], endpoint: str, container: str = "") -> tuple[str, str]:
    """`http://<node>/<endpoint>/<namespace>/<pod>[/<container>]` on the pod's node (the kubelet's API), and its
    name."""
    meta = pod["metadata"]
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name:
        raise errors.bad_request(f"pod {meta['name']} does not have a host assigned")
    node = api.find(api.registry.builtin("", "v1", "nodes"), None, node_name)
    if node is None:
        raise errors.not_found("nodes", "", node_name)
    address = node_endpoint(node)
    if address is None:
        raise errors.APIError(
            503,
            "ServiceUnavailable",
            f'node "{node_name}" publishes no kubelet endpoint (InternalIP and daemonEndpoints.kubeletEndpoint.Port)',
        )
    host, port = address
    parts = (meta["namespace"], meta["name"], *([container] if container else []))
    path = "/".join(quote(str(p), safe="") for p in parts)
    return f"http://{host}:{port}/{endpoint}/{path}", node_name


async def node_refusal(answer: aiohttp.ClientResponse, pod: str) -> errors.APIError:
    """What the user gets for the kubelet API's non-200 answer: its text, its code when 400, 403 or 404, else 500.

    A JSON answer is the node's Status refusing this server's own token, a setup fault worth the server's log."""
    text = (await answer.text()).strip() or f"the node of pod {pod} answered HTTP {answer.status}"
    if answer.content_type == "application/json":
        with contextlib.suppress(ValueError, AttributeError):
            text = str(json.loads(text).get("message") or text)
        text = f"the node refused the API server: {text}"
        log.warning("the node of pod %s refused the API server: %s", pod, text)
    code = answer.status if answer.status in (400, 403, 404) else 500
    reason = {400: "BadRequest", 404: "NotFound", 403: "Forbidden"}.get(code, "InternalError")
    return errors.APIError(code, reason, text)


def _validate_options(query: dict[str, str]) -> None:
    for name, minimum in (("tailLines", 0), ("limitBytes", 1), ("sinceSeconds", 1)):
        if name in query:
            try:
                ok = int(query[name]) >= minimum
            except ValueError:
                ok = False
            if not ok:
                raise errors.bad_request(f"{name}: Invalid value: {query[name]!r}: must be an integer >= {minimum}")
    if "sinceSeconds" in query and "sinceTime" in query:
        raise errors.bad_request("at most one of `sinceTime` or `sinceSeconds` may be specified")


class PodLogs:
    """The handler of `GET …/pods/{name}/log`."""

    def __init__(self, api: ObjectAPI) -> None:
        self.api = api

    async def handle(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        pod = requested_pod(self.api, request, target, ("GET",))
        query = {k: v for k, v in request.query.items() if k in FORWARDED_OPTIONS or k == "container"}
        _validate_options(query)
        container = pick_container(pod, query.pop("container", ""))
        url, node_name = kubelet_url(self.api, pod, "containerLogs", container)
        return await self._proxy(request, url, query, node_name, target.name)

    async def _proxy(
        self, request: web.Request, url: str, query: dict[str, str], node: str, pod: str
    ) -> web.StreamResponse:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                upstream = await session.get(url, params=query)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise errors.APIError(
                    503,
                    "ServiceUnavailable",
                    f'unable to reach node "{node}" at {url.split("/containerLogs")[0]} for the logs of pod {pod}: '
                    f"{exc}",
                ) from exc
            async with upstream:
                if upstream.status != 200:
                    raise await node_refusal(upstream, pod)
                response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
                response.enable_chunked_encoding()
                await response.prepare(request)
                try:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                except (aiohttp.ClientError, ConnectionResetError) as exc:
                    log.info("log stream of pod %s from node %s ended: %s", pod, node, exc)
                return response


def install(rest: RestHandlers, api: ObjectAPI) -> None:
    """Serve pods/log through `rest`."""
    rest.subresource_handlers[("pods", "log")] = PodLogs(api).handle
