"""`pykubevirt apiserver --plain`: the server as a plain kube-apiserver, extended only through the API.

No kind of its own beyond Kubernetes' built-in ones: CRDs come from `kubectl apply`, admission from webhook
configurations, other API groups from APIServices through the aggregation layer.
"""

from __future__ import annotations

import contextlib

from pykubevirt.api import errors
from pykubevirt.apiserver.aggregator import Aggregator
from pykubevirt.apiserver.front_proxy import AUTH_CONFIGMAP_NAME, AUTH_CONFIGMAP_NAMESPACE, ensure_front_proxy
from pykubevirt.apiserver.registration_kinds import REGISTRATION_RESOURCES
from pykubevirt.apiserver.request_context import SYSTEM_USER, RequestContext
from pykubevirt.apiserver.server import EmbeddedAPIServer, Extension
from pykubevirt.apiserver.webhook_admission import WebhookAdmission
from pykubevirt.apiserver.webhook_configurations import WebhookConfigurationAdmission
from pykubevirt.apiserver.workload_kinds import WORKLOAD_RESOURCES


def _publish_authentication(server: EmbeddedAPIServer, data: dict[str, str]) -> None:
    """Write kube-system/extension-apiserver-authentication, which extension API servers read at start."""
    config_maps = server.registry.builtin("", "v1", "configmaps")
    ctx = RequestContext(user=SYSTEM_USER)
    current = server.api.find(config_maps, AUTH_CONFIGMAP_NAMESPACE, AUTH_CONFIGMAP_NAME)
    body = {"metadata": {"name": AUTH_CONFIGMAP_NAME, "namespace": AUTH_CONFIGMAP_NAMESPACE}, "data": data}
    if current is None:
        server.api.create(config_maps, AUTH_CONFIGMAP_NAMESPACE, body, ctx)
    elif current.get("data") != data:
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        with contextlib.suppress(errors.APIError):
            server.api.update(config_maps, AUTH_CONFIGMAP_NAMESPACE, AUTH_CONFIGMAP_NAME, body, ctx)


def extension() -> Extension:
    """What `pykubevirt apiserver --plain` hands its server instead of KubeVirt."""

    def install(server: EmbeddedAPIServer) -> None:
        server.registry.extend((*REGISTRATION_RESOURCES, *WORKLOAD_RESOURCES))
        server.add_admission(WebhookConfigurationAdmission())
        webhooks = WebhookAdmission(server.store, server.registry)
        server.add_admission(webhooks)
        server.rest.evictions.admission.append(webhooks.evict)
        server.rest.delete_admission.append(webhooks.admit_delete)
        server.rest.suspend_writes = webhooks.may_apply
        front_proxy = ensure_front_proxy(server.pki.directory)
        aggregator = Aggregator(server.api, server.extra_groups, front_proxy)

        async def start() -> None:
            _publish_authentication(server, front_proxy.configmap_data())
            server.run_task("apiservice-availability", aggregator.run)

        server.on_start(start)
        server.add_cleanup(aggregator.close)
        server.add_cleanup(webhooks.close)

    return install
