"""`pods/portforward`: `kubectl port-forward` over a WebSocket tunnel (`SPDY/3.1+portforward.k8s.io`, what kubectl
1.31+ tries first), relayed message by message to the node's port-forward endpoint, which speaks the SPDY inside, as
kube-apiserver tunnels it to the kubelet.

Before upgrading, the node is asked whether the pod runs there, so a refusal reaches kubectl as a Status. kubectl
falls back to a plain SPDY upgrade when the WebSocket one is refused; that is not served.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from pykubevirt.apiserver.http_api import RestHandlers, Target
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.pod_logs import kubelet_url, requested_pod
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.apiserver.websocket_relay import relay_to_node

PROTOCOL = "SPDY/3.1+portforward.k8s.io"
SPDY_REFUSED = (
    "unable to upgrade connection: this server runs port-forward over WebSockets only (SPDY/3.1+portforward.k8s.io, "
    "kubectl 1.31 or newer); SPDY is not supported"
)


class PodPortForward:
    """The handler of `GET|POST …/pods/{name}/portforward`."""

    def __init__(self, api: ObjectAPI, credential: Callable[[], str]) -> None:
        self.api = api
        self.credential = credential  # the API server's own token for the nodes, as for exec

    async def handle(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        pod = requested_pod(self.api, request, target, ("GET", "POST"))
        url, _ = kubelet_url(self.api, pod, "portForward")
        return await relay_to_node(
            request, url, target.name, self.credential(), (PROTOCOL,), without_upgrade=SPDY_REFUSED
        )


def install(rest: RestHandlers, api: ObjectAPI, credential: Callable[[], str]) -> None:
    """Serve pods/portforward through `rest`, reaching the nodes with `credential`."""
    rest.subresource_handlers[("pods", "portforward")] = PodPortForward(api, credential).handle
