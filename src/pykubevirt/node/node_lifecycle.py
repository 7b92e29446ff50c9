"""kube-controller-manager's node lifecycle loop, embedded: stale nodes go Unknown and conditions become taints.

A node whose Ready heartbeat is older than `node_monitor_grace` gets Ready=Unknown (NodeStatusUnknown); the
NoSchedule taints follow the conditions as TaintNodesByCondition keeps them (Ready False → not-ready, Unknown →
unreachable, pressure conditions, spec.unschedulable), so they disappear again once the node agent reports Ready.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import objects
from pykubevirt.api.pod_defaults import NOT_READY_TAINT, UNREACHABLE_TAINT
from pykubevirt.api.timestamps import format_time, parse_time
from pykubevirt.client.api import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient, Object
from pykubevirt.client.controller import Controller, Result
from pykubevirt.client.errors import Conflict, NotFound
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import NODES
from pykubevirt.node.scheduling_predicates import NO_SCHEDULE, UNSCHEDULABLE_TAINT

log = logging.getLogger("pykubevirt.node.lifecycle")

DEFAULT_NODE_MONITOR_GRACE_SECONDS = 40.0
# nodeConditionToTaintKeyStatusMap: condition type → {status: taint key}.
CONDITION_TAINTS: dict[str, dict[str, str]] = {
    "Ready": {"False": NOT_READY_TAINT, "Unknown": UNREACHABLE_TAINT},
    "MemoryPressure": {"True": "node.kubernetes.io/memory-pressure"},
    "DiskPressure": {"True": "node.kubernetes.io/disk-pressure"},
    "NetworkUnavailable": {"True": "node.kubernetes.io/network-unavailable"},
    "PIDPressure": {"True": "node.kubernetes.io/pid-pressure"},
}
_MANAGED_TAINTS = frozenset({UNSCHEDULABLE_TAINT, *(k for m in CONDITION_TAINTS.values() for k in m.values())})
# Conditions the kubelet posts that go Unknown with Ready when it stops posting.
_KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
REASON_UNKNOWN = "NodeStatusUnknown"
MESSAGE_UNKNOWN = "Kubelet stopped posting node status."
REASON_NEVER_UPDATED = "NodeStatusNeverUpdated"
MESSAGE_NEVER_UPDATED = "Kubelet never posted node status."


def last_heartbeat(node: Object) -> datetime | None:
    """The Ready condition's lastHeartbeatTime (else its lastTransitionTime), else the node's creation time."""
    ready = objects.condition(node, "Ready") or {}
    return (
        parse_time(ready.get("lastHeartbeatTime"))
        or parse_time(ready.get("lastTransitionTime"))
        or parse_time((node.get("metadata") or {}).get("creationTimestamp"))
    )


def desired_taints(node: Object) -> list[dict[str, str]]:
    """The NoSchedule taints the node's conditions and spec.unschedulable call for."""
    taints = []
    for kind, by_status in CONDITION_TAINTS.items():
        condition = objects.condition(node, kind)
        if condition is not None and str(condition.get("status")) in by_status:
            taints.append({"key": by_status[str(condition["status"])], "effect": NO_SCHEDULE})
    if (node.get("spec") or {}).get("unschedulable"):
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": NO_SCHEDULE})
    return taints


def reconciled_taints(node: Object) -> list[dict[str, Any]] | None:
    """The node's taints with the managed NoSchedule ones made to match its state; None when nothing changes."""
    current: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])

    def managed(taint: dict[str, Any]) -> bool:
        return taint.get("effect") == NO_SCHEDULE and taint.get("key") in _MANAGED_TAINTS

    wanted = desired_taints(node)
    have = {str(t.get("key")) for t in current if managed(t)}
    if have == {t["key"] for t in wanted}:
        return None
    kept = [t for t in current if not managed(t) or t.get("key") in {w["key"] for w in wanted}]
    return kept + [t for t in wanted if t["key"] not in have]


def stale_conditions(node: Object, now: datetime) -> list[dict[str, Any]]:
    """The conditions to set Unknown on a node that stopped (or never started) posting status."""
    ready = objects.condition(node, "Ready")
    stamp = format_time(now)
    if ready is None:
        created = (node.get("metadata") or {}).get("creationTimestamp") or stamp
        return [
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": REASON_NEVER_UPDATED,
                "message": MESSAGE_NEVER_UPDATED,
                "lastHeartbeatTime": created,
                "lastTransitionTime": stamp,
            }
        ]
    changes = []
    for kind in _KUBELET_CONDITIONS:
        condition = objects.condition(node, kind)
        if condition is None or condition.get("status") == "Unknown":
            continue
        changes.append(
            {
                "type": kind,
                "status": "Unknown",
                "reason": REASON_UNKNOWN,
                "message": MESSAGE_UNKNOWN,
                "lastTransitionTime": stamp,
            }
        )
    return changes


class NodeLifecycle:
    """Marks nodes with stale heartbeats Unknown and keeps their condition taints; `run()` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        *,
        node_monitor_grace: float = DEFAULT_NODE_MONITOR_GRACE_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.node_monitor_grace = node_monitor_grace
        self.clock = clock
        self.nodes = Informer(client, NODES)
        self.controller = Controller("node-lifecycle", self, workers=2).watch(self.nodes)
        self.marked_unknown = 0

    async def run(self) -> None:
        task = asyncio.create_task(self.nodes.run(), name="node-lifecycle-nodes")
        try:
            await self.controller.run()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def reconcile(self, key: str) -> Result | None:
        node = self.nodes.get(key)
        if node is None:
            return None
        now = self.clock()
        heartbeat = last_heartbeat(node)
        age = (now - heartbeat).total_seconds() if heartbeat is not None else self.node_monitor_grace + 1
        ready = objects.condition(node, "Ready")
        if age > self.node_monitor_grace and (ready is None or ready.get("status") != "Unknown"):
            await self._mark_unknown(key, node, now)
            return None  # the status update comes back as an event and the taints follow then
        taints = reconciled_taints(node)
        if taints is not None:
            await self._patch(key, node, {"spec": {"taints": taints}}, MERGE_PATCH, "")
            log.info("node %s taints: %s", key, taints, extra={"node": key})
        if ready is None or ready.get("status") != "Unknown":
            # Nothing may happen to the node before its heartbeat goes stale: look again at that moment.
            return Result(requeue_after=max(self.node_monitor_grace - age, 0.0) + 0.1)
        return None

    async def _mark_unknown(self, key: str, node: Object, now: datetime) -> None:
        conditions = stale_conditions(node, now)
        if not conditions:
            return
        await self._patch(key, node, {"status": {"conditions": conditions}}, STRATEGIC_MERGE_PATCH, "status")
        self.marked_unknown += 1
        log.warning("node %s stopped posting status; marked Ready=Unknown", key, extra={"node": key})

    async def _patch(self, key: str, node: Object, patch: dict[str, Any], patch_type: str, subresource: str) -> None:
        # The resourceVersion makes the write conditional: a heartbeat that lands first wins and we look again.
        patch = {**patch, "metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")}}
        try:
            await self.client.patch(NODES, key, patch, patch_type=patch_type, subresource=subresource)
        except NotFound:
            return
        except Conflict:
            self.controller.queue.add_after(key, 0.2)
