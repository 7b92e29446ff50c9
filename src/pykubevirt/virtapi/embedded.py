"""KubeVirt inside the embedded API server: its CRDs, its admission webhooks run in-process, and virt-api's
subresource group served in-process, as an aggregated API would be.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from pykubevirt.api.crd import crd_manifest
from pykubevirt.api.kinds import ALL_KINDS
from pykubevirt.api.network_attachment import NETWORK_ATTACHMENT_DEFINITION
from pykubevirt.api.volume_snapshot import SNAPSHOT_KINDS, SnapshotValidation
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.apiserver.server import EmbeddedAPIServer, Extension
from pykubevirt.client.api import KubeClient
from pykubevirt.client.config import load_kubeconfig
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.virtapi import discovery, export_proxy, upload_proxy
from pykubevirt.virtapi.app import SubresourceAPI
from pykubevirt.virtapi.embedded_admission import KubeVirtAdmission
from pykubevirt.virtapi.eviction_admission import LauncherEvictionAdmission
from pykubevirt.virtapi.handler_client import HandlerClient
from pykubevirt.virtapi.identities import COMPONENTS, KUBEVIRT_NAMESPACE
from pykubevirt.virtapi.rbac_policy import kubevirt_policy
from pykubevirt.virtapi.webhooks import add_webhook_routes

KUBECONFIG_NAME = "virt-api.kubeconfig"


def extension(config: ClusterConfig) -> Extension:
    """What `pykubevirt apiserver` hands its server: KubeVirt's CRDs, admission, webhooks and subresources."""

    def install(server: EmbeddedAPIServer) -> None:
        admission = KubeVirtAdmission(server.store, server.registry, config, server.authorizer)
        server.add_crds(crd_manifest(kind) for kind in ALL_KINDS)
        # Multus's CRD, which a real cluster has from Multus: the node agent delegates to the networks it defines.
        server.add_crds([crd_manifest(NETWORK_ATTACHMENT_DEFINITION)])
        # external-snapshotter's CRDs (and their CEL rules, checked in Python), for the embedded CSI snapshotter.
        server.add_crds(crd_manifest(kind) for kind in SNAPSHOT_KINDS)
        server.add_admission(SnapshotValidation())
        server.add_bootstrap_policy(kubevirt_policy())
        server.add_namespace(KUBEVIRT_NAMESPACE)
        for component, user in COMPONENTS.items():
            server.add_component(component, user)
        server.add_admission(admission)
        server.rest.evictions.admission.append(LauncherEvictionAdmission(server.api, admission.config))
        # The webhook endpoints let a real kube-apiserver call the same chain (cluster mode, or tests of it).
        server.add_routes(lambda app: add_webhook_routes(app, admission.context))
        # CDI's upload proxy: its own token checks, on the server's port.
        uploads = upload_proxy.UploadAPI(upload_proxy.UploadTokens(server.data_dir))
        server.public_paths.update([*upload_proxy.PROXY_PATHS, "/v1beta1/upload-async"])
        server.add_routes(lambda app: upload_proxy.add_proxy_routes(app, uploads))
        # KubeVirt's export proxy: the server behind each link checks the export's token.
        exports = export_proxy.ExportProxy()
        server.public_prefixes.append(export_proxy.PREFIX)
        server.add_routes(lambda app: export_proxy.add_export_routes(app, exports))
        server.on_start(lambda: serve_subresources(server, admission.config, uploads, exports))

    return install


async def serve_subresources(
    server: EmbeddedAPIServer,
    config: Callable[[], ClusterConfig] | None = None,
    uploads: upload_proxy.UploadAPI | None = None,
    exports: export_proxy.ExportProxy | None = None,
) -> None:
    """Serve subresources.kubevirt.io/{v1,v1alpha3} from `server` once it has started (its kubeconfigs exist).

    Writes go back through the server's HTTPS API as virt-api's service account, passing admission like any client's.
    """
    client = KubeClient(load_kubeconfig(server.data_dir / KUBECONFIG_NAME), qps=0, user_agent="virt-api")
    # Handlers that serve https in embedded mode use a certificate of the server's CA.
    api = SubresourceAPI(client, HandlerClient(client, server.pki.client_ssl_context()), config)

    async def handle(request: web.Request, user: UserInfo) -> web.StreamResponse:
        # The server's middleware has authenticated the caller; virt-api acts as itself from here.
        return await api.handle(request)

    for version in discovery.VERSIONS:
        server.extra_groups[(discovery.GROUP, version)] = (handle, discovery.resource_list(version))
    if uploads is not None:
        uploads.client = client
        key = (upload_proxy.GROUP, upload_proxy.VERSION)
        server.extra_groups[key] = (uploads.token_request, upload_proxy.resource_list())
    if exports is not None:
        exports.client = client

    async def close() -> None:
        await api.close()
        if uploads is not None:
            await uploads.close()
        if exports is not None:
            await exports.close()
        await client.close()

    server.add_cleanup(close)
