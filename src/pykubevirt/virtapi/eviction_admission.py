"""KubeVirt's `virt-launcher-eviction-interceptor.kubevirt.io` webhook on pods/eviction, run in-process.

The verdict is `eviction_decision`'s. A VMI marked with `status.evacuationNodeName` is turned into a migration by the
evacuation controller (External: an outside actor acts on it); the 429 makes `kubectl drain` retry until the
launcher has completed and may go.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pykubevirt.api import errors
from pykubevirt.apiserver.eviction import webhook_denied
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.patching import JSON_PATCH
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.security import service_account_groups
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.virtapi.eviction_decision import DENIED_CODE, WEBHOOK_NAME, decide, evacuation_patch, launcher_vmi
from pykubevirt.virtapi.identities import KUBEVIRT_NAMESPACE, VIRT_API_USER

VIRT_API = UserInfo(VIRT_API_USER, service_account_groups(KUBEVIRT_NAMESPACE))


def _denied(message: str) -> errors.APIError:
    return webhook_denied(WEBHOOK_NAME, message, DENIED_CODE)


class LauncherEvictionAdmission:
    """The webhook over the embedded server's objects; writes the VMI as virt-api does."""

    def __init__(self, api: ObjectAPI, config: Callable[[], ClusterConfig]) -> None:
        self.api = api
        self.config = config

    def __call__(self, pod: dict[str, Any], eviction: dict[str, Any] | None, ctx: RequestContext) -> None:
        vmi_name = launcher_vmi(pod)
        vmis = self.api.registry.get("kubevirt.io", "v1", "virtualmachineinstances")
        if vmi_name is None or vmis is None:
            return
        vmi = self.api.find(vmis, str(pod["metadata"].get("namespace")), vmi_name)
        verdict = decide(pod, vmi, self.config())
        if verdict.denial is None:
            return
        if verdict.evacuate_to is not None and vmi is not None and not ctx.dry_run:
            self._mark(vmis, vmi, verdict.evacuate_to, eviction)
        raise _denied(verdict.denial)

    def _mark(self, vmis: Any, vmi: dict[str, Any], node: str, eviction: dict[str, Any] | None) -> None:
        meta = vmi["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        patch = evacuation_patch(vmi, node, eviction)
        ctx = RequestContext(user=VIRT_API, user_agent="virt-api")
        try:
            self.api.patch(vmis, namespace, name, json.dumps(patch).encode(), JSON_PATCH, ctx)
        except errors.APIError as exc:
            raise _denied(f"kubevirt failed marking the vmi for eviction: {exc.message}") from exc
