"""kube-controller-manager's pod garbage collector (PodGC), in-process.

Every 20 s it force-deletes the pods nothing else will ever finish:
- pods bound to a node that has been missing for 40 s (no kubelet is left to end them);
- terminating pods on a node that is not Ready and carries the out-of-service taint;
- terminating pods never scheduled;
- and, beyond 12,500 finished pods, the oldest of them (kube-controller-manager's --terminated-pod-gc-threshold).

A pod not yet finished is first marked `Failed` through a forced server-side apply of its status by the `PodGC`
manager (an orphaned one with a `DisruptionTarget` condition), so its owner sees how it ended.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import errors, objects
from pykubevirt.api.timestamps import format_time
from pykubevirt.apiserver.deletion import DeleteOptions
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.patching import APPLY_PATCH
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Resource

log = logging.getLogger("pykubevirt.apiserver.podgc")

PODGC_USER = UserInfo("system:serviceaccount:kube-system:pod-garbage-collector", ("system:serviceaccounts",))
FIELD_MANAGER = "PodGC"
CHECK_PERIOD_SECONDS = 20.0
QUARANTINE_SECONDS = 40.0
TERMINATED_POD_THRESHOLD = 12_500
NODE_GONE = ("DeletionByPodGC", "PodGC: node no longer exists")
FINISHED = ("Succeeded", "Failed")


def _shut_down(node: dict[str, Any] | None) -> bool:
    """Not Ready and tainted out-of-service (kube's TaintKeyExists: the key alone, whatever the effect)."""
    if node is None or objects.condition_true(node, "Ready"):
        return False
    return any(t.get("key") == c.OUT_OF_SERVICE_TAINT for t in objects.spec(node).get("taints") or [])


class PodGarbageCollector:
    """Looks over every pod each `check_period` seconds; a node must stay missing for `quarantine` seconds."""

    def __init__(
        self,
        api: ObjectAPI,
        *,
        check_period: float = CHECK_PERIOD_SECONDS,
        quarantine: float = QUARANTINE_SECONDS,
        terminated_threshold: int = TERMINATED_POD_THRESHOLD,
    ) -> None:
        self.api = api
        self.pods: Resource = api.registry.builtin("", "v1", "pods")
        self.nodes: Resource = api.registry.builtin("", "v1", "nodes")
        self.check_period = check_period
        self.quarantine = quarantine
        self.terminated_threshold = terminated_threshold
        # Node name → when a pod was first seen bound to it while it did not exist.
        self._missing_since: dict[str, float] = {}

    async def run(self) -> None:
        """Collect until cancelled; one failure never stops the collector."""
        while True:
            await asyncio.sleep(self.check_period)
            try:
                self.collect()
            except Exception:
                log.exception("pod garbage collection failed")

    def collect(self) -> None:
        """One pass, in kube's order: finished pods over the threshold, out-of-service, orphaned, unscheduled."""
        pods = [record.value for record in self.api.store.records(self.pods.collection)]
        nodes = {str(r.value["metadata"]["name"]): r.value for r in self.api.store.records(self.nodes.collection)}
        self._over_threshold(pods)
        for pod in pods:
            if _terminating(pod) and _shut_down(nodes.get(_node_name(pod))):
                log.info("garbage collecting pod %s/%s, terminating on an out-of-service node", *_names(pod))
                self._fail_and_delete(pod, None)
        gone = self._gone_nodes(pods, nodes, time.monotonic())
        for pod in pods:
            if _node_name(pod) in gone:
                log.info("found orphaned pod %s/%s on deleted node %s, deleting", *_names(pod), _node_name(pod))
                self._fail_and_delete(pod, NODE_GONE)
        for pod in pods:
            if objects.is_marked_for_deletion(pod) and not _node_name(pod):
                log.info("found unscheduled terminating pod %s/%s, deleting", *_names(pod))
                self._fail_and_delete(pod, None)

    def _gone_nodes(self, pods: list[dict[str, Any]], nodes: dict[str, Any], now: float) -> set[str]:
        """Nodes pods are bound to that have been missing for the whole quarantine."""
        missing = {_node_name(p) for p in pods} - set(nodes) - {""}
        # A node that came back, or that no pod names any more, starts its quarantine afresh if it goes again.
        self._missing_since = {name: self._missing_since.get(name, now) for name in missing}
        return {name for name, since in self._missing_since.items() if now - since >= self.quarantine}

    def _over_threshold(self, pods: list[dict[str, Any]]) -> None:
        if self.terminated_threshold <= 0:
            return
        finished = [p for p in pods if _terminated(p)]
        excess = len(finished) - self.terminated_threshold
        if excess <= 0:
            return
        # Evicted pods first, then the oldest (byEvictionAndCreationTimestamp).
        finished.sort(key=lambda p: (not _evicted(p), str(p["metadata"].get("creationTimestamp") or ""), *_names(p)))
        log.info("garbage collecting %d terminated pods", excess)
        for pod in finished[:excess]:
            self._fail_and_delete(pod, None)

    def _fail_and_delete(self, pod: dict[str, Any], condition: tuple[str, str] | None) -> None:
        """Mark the pod Failed (unless it finished) and delete it at once, as PodGC's markFailedAndDeletePod."""
        namespace, name = _names(pod)
        ctx = RequestContext(
            user=PODGC_USER, user_agent="kube-controller-manager", field_manager=FIELD_MANAGER, force=True
        )
        try:
            if objects.status(pod).get("phase") not in FINISHED:
                status: dict[str, Any] = {"phase": "Failed"}
                if condition is not None:
                    reason, message = condition
                    status["conditions"] = [
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": reason,
                            "message": message,
                            "lastTransitionTime": format_time(datetime.now(UTC)),
                        }
                    ]
                applied = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
                applied["status"] = status
                body = json.dumps(applied).encode()
                self.api.patch(self.pods, namespace, name, body, APPLY_PATCH, ctx, subresource="status")
            options = DeleteOptions(grace_period_seconds=0, precondition_uid=objects.uid_of(pod))
            self.api.delete(self.pods, namespace, name, options, ctx)
        except errors.APIError as exc:
            # Gone already, or replaced by a pod of the same name: nothing of this one is left to collect.
            if exc.code not in (404, 409):
                log.warning("pod garbage collection of %s/%s: %s", namespace, name, exc.message)
            return
        log.info("forced deletion of pod %s/%s succeeded", namespace, name)


def _node_name(pod: dict[str, Any]) -> str:
    return str(objects.spec(pod).get("nodeName") or "")


def _terminated(pod: dict[str, Any]) -> bool:
    # kube's isPodTerminated: any phase but the three of a pod still to run.
    return objects.status(pod).get("phase") not in ("Pending", "Running", "Unknown")


def _terminating(pod: dict[str, Any]) -> bool:
    return objects.is_marked_for_deletion(pod) and not _terminated(pod)


def _evicted(pod: dict[str, Any]) -> bool:
    status = objects.status(pod)
    return status.get("phase") == "Failed" and status.get("reason") == "Evicted"


def _names(pod: dict[str, Any]) -> tuple[str, str]:
    meta = pod["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])
