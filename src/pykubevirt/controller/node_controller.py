"""The node controller: a node whose virt-handler stopped heartbeating is made unschedulable and the VMIs whose
launcher pods are known dead are failed (NodeUnresponsive); a fenced node's VMIs are failed at once.

KubeVirt waits 5 minutes; pykubevirt defaults to 60 s (see the README). Without a fence, a silent node's guests may
still run, so its VMIs stay as they are, as in KubeVirt. Fenced means Kubernetes' non-graceful node shutdown taint
`node.kubernetes.io/out-of-service` (put by an admin, a remediation operator, or the embedded supervisor after it
killed the node's processes): its VMIs fail with NodeUnresponsive and their launcher pods are force-deleted, so
Always and RerunOnFailure VMs start on another node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from pykubevirt.api import constants as c
from pykubevirt.api.json_lookup import get
from pykubevirt.api.timestamps import parse_time
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.events import NORMAL, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import NODES, PODS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.controller import pod_state
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.node")

NODE_UNRESPONSIVE = "NodeUnresponsive"
DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 60.0
DEFAULT_RECHECK_SECONDS = 10.0
VMI_NODE_INDEX = "node-name"
POD_NODE_INDEX = "pod-node"
NO_EXECUTE = "NoExecute"


def node_unresponsive(node: Object | None, timeout: float, now: datetime) -> bool:
    """True for a deleted node or one whose heartbeat is missing-and-old or older than `timeout`."""
    if node is None:
        return True
    heartbeat = get(node, "metadata", "annotations", c.HEARTBEAT_ANNOTATION)
    if heartbeat:
        moment = parse_time(heartbeat)
        return moment is None or (now - moment).total_seconds() > timeout
    created = parse_time((node.get("metadata") or {}).get("creationTimestamp"))
    return created is not None and (now - created).total_seconds() > timeout


def out_of_service(node: Object | None) -> bool:
    """True for a node carrying the out-of-service taint with effect NoExecute (non-graceful node shutdown)."""
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return any(t.get("key") == c.OUT_OF_SERVICE_TAINT and t.get("effect") == NO_EXECUTE for t in taints)


def tolerates_out_of_service(pod: Object) -> bool:
    """A pod with a toleration of the out-of-service NoExecute taint (a mirror pod tolerates everything)."""
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if (toleration.get("effect") or NO_EXECUTE) != NO_EXECUTE:
            continue
        if (toleration.get("key") or c.OUT_OF_SERVICE_TAINT) != c.OUT_OF_SERVICE_TAINT:
            continue
        if toleration.get("operator") == "Exists" or not toleration.get("value"):
            return True
    return False


def alive_pod(pod: Object) -> bool:
    """A launcher pod that is not finished and whose containers are not all terminated."""
    if pod_state.pod_is_down(pod):
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return not statuses or any((s.get("state") or {}).get("terminated") is None for s in statuses)


class NodeController:
    """Reconciles nodes by name; every node is looked at again every `recheck` seconds."""

    def __init__(
        self,
        client: KubeClient,
        *,
        nodes: Informer,
        vmis: Informer,
        pods: Informer,
        recorder: EventRecorder,
        heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
        recheck: float = DEFAULT_RECHECK_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.vmis = vmis
        self.pods = pods
        self.recorder = recorder
        self.heartbeat_timeout = heartbeat_timeout
        self.recheck = recheck
        self.clock = clock

    async def reconcile(self, key: str) -> Result | None:
        node = self.nodes.get(key)
        fenced = out_of_service(node)
        if fenced or node_unresponsive(node, self.heartbeat_timeout, self.clock()):
            if node is not None and (node["metadata"].get("labels") or {}).get(c.NODE_SCHEDULABLE_LABEL) == "true":
                await self._mark_unschedulable(node)
            await self._fail_stuck_vmis(key, fenced=fenced)
            if fenced:
                await self._force_delete_pods(key)
        return Result(requeue_after=self.recheck) if node is not None else None

    async def _mark_unschedulable(self, node: Object) -> None:
        self.recorder.event(
            node, NORMAL, NODE_UNRESPONSIVE, "virt-handler is not responsive, marking node as unresponsive"
        )
        log.warning("marking node as unresponsive", extra=object_fields(node, node=node["metadata"]["name"]))
        patch = {"metadata": {"labels": {c.NODE_SCHEDULABLE_LABEL: "false"}}}
        try:
            await self.client.patch(NODES, node["metadata"]["name"], patch)
        except NotFound:
            return

    async def _fail_stuck_vmis(self, node_name: str, *, fenced: bool) -> None:
        """Fail the node's VMIs: all of them on a fenced node, else those whose launcher pod is known dead."""
        active = [
            v
            for v in self.vmis.by_index(VMI_NODE_INDEX, node_name)
            if (v.get("status") or {}).get("phase") not in c.FINAL_PHASES
        ]
        if not active:
            return
        alive_owners = {
            ref.get("uid")
            for pod in self.pods.by_index(POD_NODE_INDEX, node_name)
            if alive_pod(pod)
            for ref in pod["metadata"].get("ownerReferences") or []
            if ref.get("controller") and ref.get("kind") == c.VMI_KIND and not fenced
        }
        reason = "is fenced (out-of-service)" if fenced else "is not responsive"
        for vmi in active:
            if vmi["metadata"]["uid"] in alive_owners:
                continue
            self.recorder.event(
                vmi,
                NORMAL,
                NODE_UNRESPONSIVE,
                f"virt-handler on node {node_name} {reason}, marking VMI as failed",
            )
            patch = [
                {"op": "replace", "path": "/status/phase", "value": c.PHASE_FAILED},
                {"op": "add", "path": "/status/reason", "value": NODE_UNRESPONSIVE},
            ]
            try:
                await self.client.patch(
                    VIRTUAL_MACHINE_INSTANCES,
                    vmi["metadata"]["name"],
                    patch,
                    vmi["metadata"]["namespace"],
                    patch_type=JSON_PATCH,
                )
                log.warning("failed VMI on unresponsive node %s", node_name, extra=object_fields(vmi, node=node_name))
            except ApiError as exc:
                log.warning("could not fail VMI on unresponsive node: %s", exc.message, extra=object_fields(vmi))

    async def _force_delete_pods(self, node_name: str) -> None:
        """Force-delete (grace 0) the launcher pods on a fenced node: nothing there runs them any more."""
        for pod in self.pods.by_index(POD_NODE_INDEX, node_name):
            owners = pod["metadata"].get("ownerReferences") or []
            if tolerates_out_of_service(pod) or not any(ref.get("kind") == c.VMI_KIND for ref in owners):
                continue
            name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
            try:
                await self.client.delete(PODS, name, namespace, grace_period_seconds=0)
            except NotFound:
                continue
            except ApiError as exc:
                log.warning("could not force-delete pod on fenced node: %s", exc.message, extra=object_fields(pod))
                continue
            log.warning("force-deleted pod on fenced node %s", node_name, extra=object_fields(pod, node=node_name))
