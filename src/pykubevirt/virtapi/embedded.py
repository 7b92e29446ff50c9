"""virt-api inside the embedded API server: the subresource group served in-process, as an aggregated API would be."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from pykubevirt.apiserver.object_api import UserInfo
from pykubevirt.client.api import KubeClient
from pykubevirt.client.config import load_kubeconfig
from pykubevirt.virtapi import discovery
from pykubevirt.virtapi.app import SubresourceAPI
from pykubevirt.virtapi.handler_client import HandlerClient

if TYPE_CHECKING:
    from pykubevirt.apiserver.server import EmbeddedAPIServer

KUBECONFIG_NAME = "virt-api.kubeconfig"


async def install(server: EmbeddedAPIServer) -> None:
    """Serve subresources.kubevirt.io/{v1,v1alpha3} from `server` once it has started (its kubeconfigs exist).

    Writes go back through the server's HTTPS API as virt-api's service account, passing admission like any client's.
    """
    client = KubeClient(load_kubeconfig(server.data_dir / KUBECONFIG_NAME), qps=0, user_agent="virt-api")
    # Handlers that serve https in embedded mode use a certificate of the server's CA.
    api = SubresourceAPI(client, HandlerClient(client, server.pki.client_ssl_context()))

    async def handle(request: web.Request, user: UserInfo) -> web.StreamResponse:
        # The server's middleware has authenticated the caller; virt-api acts as itself from here.
        return await api.handle(request)

    for version in discovery.VERSIONS:
        server.extra_groups[(discovery.GROUP, version)] = (handle, discovery.resource_list(version))

    async def close() -> None:
        await api.close()
        await client.close()

    server.add_cleanup(close)
