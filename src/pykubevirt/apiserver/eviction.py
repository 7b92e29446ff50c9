"""The pods/eviction subresource as kube-apiserver's (`pkg/registry/core/pod/storage/eviction.go`).

Admission for the eviction (KubeVirt's `virt-launcher-eviction-interceptor` webhook, in-process) runs first; then a
pod that is covered by a PodDisruptionBudget is deleted only if the budget allows one more disruption, which the
eviction takes from it. Every refusal is a Status: 429 for a budget that allows none, which `kubectl drain` retries.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver import disruption_budget
from pykubevirt.apiserver.deletion import DeleteOptions
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import RequestContext
from pykubevirt.apiserver.resources import Resource

# Validating admission of a CREATE on pods/eviction: the pod, the Eviction body (None when empty), the request.
# It refuses by raising an APIError.
EvictionAdmission = Callable[[dict[str, Any], dict[str, Any] | None, RequestContext], None]

# Pods in these phases have nothing a budget protects (canIgnorePDB).
_IGNORED_PHASES = frozenset({"Succeeded", "Failed", "Pending"})


class Evictions:
    """Evicts pods through admission and their disruption budgets."""

    def __init__(self, api: ObjectAPI, clock: Callable[[], datetime]) -> None:
        self.api = api
        self.clock = clock
        self.admission: list[EvictionAdmission] = []

    def _budgets(self) -> Resource:
        return self.api.registry.builtin("policy", "v1", "poddisruptionbudgets")

    def evict(
        self, pods: Resource, namespace: str | None, name: str, eviction: dict[str, Any] | None, ctx: RequestContext
    ) -> None:
        """Evict the pod or raise kube's error; the pod is deleted with the eviction's deleteOptions."""
        pod = self.api.get(pods, namespace, name)
        options = DeleteOptions.from_body((eviction or {}).get("deleteOptions"), {})
        ctx.dry_run = ctx.dry_run or options.dry_run
        for admit in self.admission:
            admit(pod, eviction, ctx)
        if self._budget_applies(pod):
            self._take_disruption(pod, namespace, ctx)
        self.api.delete(pods, namespace, name, options, ctx)

    @staticmethod
    def _budget_applies(pod: dict[str, Any]) -> bool:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return False
        return (pod.get("status") or {}).get("phase") not in _IGNORED_PHASES

    def _take_disruption(self, pod: dict[str, Any], namespace: str | None, ctx: RequestContext) -> None:
        resource = self._budgets()
        budgets, _, _ = self.api.list_objects(resource, namespace)
        covering = [pdb for pdb in budgets if disruption_budget.covers(pdb, pod)]
        if not covering:
            return
        if len(covering) > 1:
            raise disruption_budget.multiple_budgets()
        pdb = covering[0]
        status = disruption_budget.check_eviction(pdb, pod, self.clock())
        if status is None or ctx.dry_run:
            return
        updated = copy_json(pdb)
        updated["status"] = status
        # The budget's resourceVersion is a precondition: a concurrent eviction that took the last disruption
        # makes this one a conflict, as with kube.
        self.api.update(resource, namespace, str(pdb["metadata"]["name"]), updated, ctx, subresource="status")


def webhook_denied(webhook: str, message: str, code: int) -> errors.APIError:
    """kube-apiserver's answer when a validating webhook refuses (ToStatusErr): the webhook's code, no reason."""
    return errors.APIError(max(code, 400), "", f'admission webhook "{webhook}" denied the request: {message}')
