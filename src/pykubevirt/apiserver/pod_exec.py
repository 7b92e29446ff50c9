"""`pods/exec`: `kubectl exec` over a WebSocket (the v5 and v4 channel protocols kubectl 1.30+ speaks first), relayed
message by message to the node's exec endpoint, as kube-apiserver relays it to the kubelet.

Before upgrading, the node is asked whether the command can run there (the pod's container running), so a refusal
reaches kubectl as a Status. kubectl falls back to SPDY when the WebSocket upgrade is refused; SPDY is not served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from pykubevirt.api import errors
from pykubevirt.apiserver.http_api import RestHandlers, Target
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.pod_logs import kubelet_url, pick_container, requested_pod
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.apiserver.websocket_relay import relay_to_node

log = logging.getLogger("pykubevirt.apiserver.pod_exec")

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
FORWARDED = ("command", "stdin", "stdout", "stderr", "tty")
SPDY_REFUSED = (
    "unable to upgrade connection: this server runs exec over WebSockets only (v5.channel.k8s.io, kubectl 1.30 "
    "or newer); SPDY is not supported"
)
_TRUE = ("true", "1")


class PodExec:
    """The handler of `GET|POST …/pods/{name}/exec`."""

    def __init__(self, api: ObjectAPI, credential: Callable[[], str]) -> None:
        self.api = api
        # The API server's own token for the nodes (kube's kubelet client identity); the node has it reviewed.
        self.credential = credential

    async def handle(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        pod = requested_pod(self.api, request, target, ("GET", "POST"))
        query = request.query
        if not any(query.get(name, "").lower() in _TRUE for name in ("stdin", "stdout", "stderr")):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        container = pick_container(pod, query.get("container", ""))
        url, _ = kubelet_url(self.api, pod, "exec", container)
        params = [(key, value) for key, value in query.items() if key in FORWARDED]
        return await relay_to_node(
            request,
            url,
            target.name,
            self.credential(),
            PROTOCOLS,
            params=params,
            without_upgrade=SPDY_REFUSED,
            default_protocol=PROTOCOLS[-1],
        )


def install(rest: RestHandlers, api: ObjectAPI, credential: Callable[[], str]) -> None:
    """Serve pods/exec through `rest`, reaching the nodes with `credential`."""
    rest.subresource_handlers[("pods", "exec")] = PodExec(api, credential).handle
