"""kube-controller-manager's disruption controller, in-process: keeps each PodDisruptionBudget's status current.

Any write to a pod or a budget queues its namespace; the namespace's budgets are then recomputed from the store
(disruption_budget.budget_status) and written when they changed. Evictions not followed by the pod's deletion
stop counting after two minutes, so a timer requeues namespaces that still hold some.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver import disruption_budget
from pykubevirt.apiserver.namespace_queue import NamespaceQueue
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.store_records import Event

DISRUPTION_USER = UserInfo("system:serviceaccount:kube-system:disruption-controller", ("system:serviceaccounts",))
RECHECK_SECONDS = 30.0


class DisruptionController:
    """Recomputes the budgets of namespaces whose pods or budgets changed, one namespace at a time."""

    def __init__(self, api: ObjectAPI, clock: Callable[[], datetime]) -> None:
        self.api = api
        self.clock = clock
        self.pods: Resource = api.registry.builtin("", "v1", "pods")
        self.budgets: Resource = api.registry.builtin("policy", "v1", "poddisruptionbudgets")
        self.queue = NamespaceQueue("disruption budgets")
        for record in api.store.records(self.budgets.collection):
            self.queue.add(str(record.value["metadata"].get("namespace", "")))
        api.store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.collection in (self.pods.collection, self.budgets.collection):
            self.queue.add(str((event.value.get("metadata") or {}).get("namespace", "")))

    async def run(self) -> None:
        """Process namespaces until cancelled; one failure never stops the controller."""
        recheck = asyncio.create_task(self._recheck())
        try:
            await self.queue.run(self.sync)
        finally:
            recheck.cancel()

    async def _recheck(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_SECONDS)
            for record in self.api.store.records(self.budgets.collection):
                if (record.value.get("status") or {}).get("disruptedPods"):
                    self.queue.add(str(record.value["metadata"].get("namespace", "")))

    def sync(self, namespace: str) -> None:
        """Write the status every budget of `namespace` should have."""
        budgets = [
            r.value for r in self.api.store.records(self.budgets.collection, self.budgets.namespace_prefix(namespace))
        ]
        if not budgets:
            return
        pods = [r.value for r in self.api.store.records(self.pods.collection, self.pods.namespace_prefix(namespace))]
        now = self.clock()
        for pdb in budgets:
            status = disruption_budget.budget_status(pdb, pods, now)
            if (pdb.get("status") or {}) == status:
                continue
            updated: dict[str, Any] = copy_json(pdb)
            updated["status"] = status
            ctx = RequestContext(user=DISRUPTION_USER, user_agent="kube-controller-manager")
            self.api.update(self.budgets, namespace, str(pdb["metadata"]["name"]), updated, ctx, subresource="status")
