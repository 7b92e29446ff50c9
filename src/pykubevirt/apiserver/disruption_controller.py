"""kube-controller-manager's disruption controller, in-process: keeps each PodDisruptionBudget's status current.

Any write to a pod or a budget queues its namespace; the namespace's budgets are then recomputed from the store
(disruption_budget.budget_status) and written when they changed. Evictions not followed by the pod's deletion
stop counting after two minutes, so a timer requeues namespaces that still hold some.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver import disruption_budget
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.store_records import Event

log = logging.getLogger("pykubevirt.apiserver.disruption")

DISRUPTION_USER = UserInfo("system:serviceaccount:kube-system:disruption-controller", ("system:serviceaccounts",))
RECHECK_SECONDS = 30.0


class DisruptionController:
    """Recomputes the budgets of namespaces whose pods or budgets changed, one namespace at a time."""

    def __init__(self, api: ObjectAPI, clock: Callable[[], datetime]) -> None:
        self.api = api
        self.clock = clock
        self.pods: Resource = api.registry.builtin("", "v1", "pods")
        self.budgets: Resource = api.registry.builtin("policy", "v1", "poddisruptionbudgets")
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._pending: set[str] = set()
        for record in api.store.records(self.budgets.collection):
            self._enqueue(str(record.value["metadata"].get("namespace", "")))
        api.store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.collection in (self.pods.collection, self.budgets.collection):
            self._enqueue(str((event.value.get("metadata") or {}).get("namespace", "")))

    def _enqueue(self, namespace: str) -> None:
        if namespace not in self._pending:
            self._pending.add(namespace)
            self._queue.put_nowait(namespace)

    async def run(self) -> None:
        """Process namespaces until cancelled; one failure never stops the controller."""
        recheck = asyncio.create_task(self._recheck())
        try:
            while True:
                namespace = await self._queue.get()
                self._pending.discard(namespace)
                try:
                    self.sync(namespace)
                except errors.APIError as exc:
                    if exc.code == 409:
                        self._enqueue(namespace)
                    elif exc.code != 404:
                        log.warning("disruption budgets of %s: %s", namespace, exc.message)
                except Exception:
                    log.exception("disruption budgets of %s failed", namespace)
                await asyncio.sleep(0)
        finally:
            recheck.cancel()

    async def _recheck(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_SECONDS)
            for record in self.api.store.records(self.budgets.collection):
                if (record.value.get("status") or {}).get("disruptedPods"):
                    self._enqueue(str(record.value["metadata"].get("namespace", "")))

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
