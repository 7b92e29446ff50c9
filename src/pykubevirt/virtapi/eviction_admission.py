"""KubeVirt's `virt-launcher-eviction-interceptor.kubevirt.io` webhook on pods/eviction, run in-process.

As upstream's PodEvictionAdmitter: a launcher pod whose VMI must move (evictionStrategy LiveMigrate, or
LiveMigrateIfPossible and migratable, or External) is not evicted. Its VMI gets `status.evacuationNodeName`, which
the evacuation controller turns into a migration (External: an outside actor acts on it), and the eviction is
refused with 429, which `kubectl drain` retries until the launcher has completed and may go.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.constants import APP_LABEL, DOMAIN_ANNOTATION
from pykubevirt.apiserver.eviction import webhook_denied
from pykubevirt.apiserver.object_api import ObjectAPI, RequestContext, UserInfo
from pykubevirt.apiserver.patching import JSON_PATCH
from pykubevirt.apiserver.security import service_account_groups
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.eviction_strategy import (
    EXTERNAL,
    LIVE_MIGRATE,
    LIVE_MIGRATE_IF_POSSIBLE,
    eviction_strategy,
    is_migratable,
)
from pykubevirt.virtapi.identities import KUBEVIRT_NAMESPACE, VIRT_API_USER

WEBHOOK_NAME = "virt-launcher-eviction-interceptor.kubevirt.io"
LAUNCHER_APP = "virt-launcher"
_MUST_MOVE = frozenset({LIVE_MIGRATE, LIVE_MIGRATE_IF_POSSIBLE, EXTERNAL})
_COMPLETED = frozenset({"Succeeded", "Failed"})
VIRT_API = UserInfo(VIRT_API_USER, service_account_groups(KUBEVIRT_NAMESPACE))


def _denied(message: str) -> errors.APIError:
    return webhook_denied(WEBHOOK_NAME, message, 429)


class LauncherEvictionAdmission:
    """The webhook over the embedded server's objects; writes the VMI as virt-api does."""

    def __init__(self, api: ObjectAPI, config: Callable[[], ClusterConfig]) -> None:
        self.api = api
        self.config = config

    def __call__(self, pod: dict[str, Any], eviction: dict[str, Any] | None, ctx: RequestContext) -> None:
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(APP_LABEL) != LAUNCHER_APP:
            return
        if (pod.get("status") or {}).get("phase") in _COMPLETED:
            return
        vmi_name = (meta.get("annotations") or {}).get(DOMAIN_ANNOTATION)
        if not vmi_name:
            return
        namespace = str(meta.get("namespace"))
        vmis = self.api.registry.get("kubevirt.io", "v1", "virtualmachineinstances")
        if vmis is None:
            return
        vmi = self.api.find(vmis, namespace, vmi_name)
        if vmi is None:
            message = f'virtualmachineinstances.kubevirt.io "{vmi_name}" not found'
            raise _denied(f"kubevirt failed getting the vmi: {message}")
        strategy = eviction_strategy(vmi, self.config())
        migratable = is_migratable(vmi)
        if strategy == LIVE_MIGRATE and not migratable:
            raise _denied(f"VMI {vmi_name} is configured with an eviction strategy but is not live-migratable")
        if strategy not in _MUST_MOVE or (strategy == LIVE_MIGRATE_IF_POSSIBLE and not migratable):
            return
        status = vmi.get("status") or {}
        if status.get("evacuationNodeName"):
            raise _denied(f'Evacuation in progress: Eviction triggered evacuation of VMI "{namespace}/{vmi_name}"')
        node = (pod.get("spec") or {}).get("nodeName")
        if status.get("nodeName") != node:
            raise _denied("Eviction request for target Pod")
        if not ctx.dry_run:
            self._mark(vmis, vmi, str(node), eviction)
        raise _denied(f'Eviction triggered evacuation of VMI "{namespace}/{vmi_name}"')

    def _mark(self, vmis: Any, vmi: dict[str, Any], node: str, eviction: dict[str, Any] | None) -> None:
        meta = vmi["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        patch: list[dict[str, Any]] = [{"op": "add", "path": "/status/evacuationNodeName", "value": node}]
        requested = ((eviction or {}).get("metadata") or {}).get("annotations") or {}
        if requested.get("requested-by") == "sigs.k8s.io/descheduler":
            if meta.get("annotations") is None:
                patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            patch.append(
                {"op": "add", "path": "/metadata/annotations/kubevirt.io~1eviction-source", "value": "descheduler"}
            )
        ctx = RequestContext(user=VIRT_API, user_agent="virt-api")
        try:
            self.api.patch(vmis, namespace, name, json.dumps(patch).encode(), JSON_PATCH, ctx)
        except errors.APIError as exc:
            raise _denied(f"kubevirt failed marking the vmi for eviction: {exc.message}") from exc
