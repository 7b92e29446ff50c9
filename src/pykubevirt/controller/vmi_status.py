"""The VMI status virt-controller computes from the VMI and its virt-launcher pod: phase, conditions, finalizers. Pure.

Upstream: pkg/virt-controller/watch/vmi/vmi.go (updateStatus) and lifecycle.go (syncReadyConditionFromPod,
syncPausedConditionToPod). VMIController only writes what `vmi_status` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.objects import condition, condition_has
from pykubevirt.api.pod_qos import qos_class
from pykubevirt.controller import pod_state
from pykubevirt.controller.hotplug_conditions import sync_hotplug_conditions
from pykubevirt.controller.migration_receiver import release_waiting_finalizers, waits_for_sync
from pykubevirt.controller.sync_error import SyncError

Object = dict[str, Any]

FAILED_GUARANTEE = "FailedGuaranteeResources"
READY = "Ready"
GUEST_NOT_RUNNING = "GuestNotRunning"
SYNCHRONIZED = "Synchronized"
POD_SCHEDULED = "PodScheduled"
PROVISIONING = "Provisioning"
EVICTION_REQUESTED = "EvictionRequested"
# VMIs in these phases belong to virt-handler; the controller only patches conditions, pods and phase on them.
HANDLER_PHASES = (c.PHASE_SCHEDULED, c.PHASE_RUNNING)


@dataclass(slots=True)
class StatusUpdate:
    """The VMI as the controller wants it, and how to write it."""

    vmi: Object
    # virt-handler drives the VMI: patch only the fields the controller owns instead of updating it whole.
    handler_owned: bool
    # Warning events to record on the VMI: (reason, message).
    warnings: list[tuple[str, str]] = field(default_factory=list)


def update_condition(vmi: Object, condition: dict[str, Any]) -> None:
    """Add the condition, or replace it when its status or reason changed (KubeVirt's UpdateCondition)."""
    conditions = vmi.setdefault("status", {}).setdefault("conditions", [])
    for i, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            if existing.get("status") != condition.get("status") or existing.get("reason") != condition.get("reason"):
                conditions[i] = condition
            return
    conditions.append(condition)


def remove_condition(vmi: Object, kind: str) -> None:
    status = vmi.setdefault("status", {})
    status["conditions"] = [x for x in status.get("conditions") or [] if x.get("type") != kind]


def sync_ready_condition(vmi: Object, pod: Object | None, now: str) -> None:
    """VMI Ready from the pod (pkg/virt-controller/watch/vmi/lifecycle.go: syncReadyConditionFromPod)."""

    def set_false(reason: str, message: str) -> None:
        update_condition(
            vmi,
            {
                "type": READY,
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": now,
                "lastTransitionTime": now,
            },
        )

    phase = (vmi.get("status") or {}).get("phase")
    if pod is None:
        set_false("PodNotExists", "virt-launcher pod has not yet been scheduled")
    elif pod_state.is_down_or_going_down(pod):
        set_false("PodTerminating", "virt-launcher pod is terminating")
    elif phase != c.PHASE_RUNNING:
        set_false(GUEST_NOT_RUNNING, "Guest VM is not reported as running")
    else:
        ready = condition(pod, "Ready")
        if ready is None:
            set_false("PodConditionMissing", "virt-launcher pod is missing the Ready condition")
            return
        update_condition(
            vmi,
            {
                "type": READY,
                "status": ready.get("status"),
                "reason": ready.get("reason"),
                "message": ready.get("message"),
                "lastProbeTime": ready.get("lastProbeTime"),
                "lastTransitionTime": ready.get("lastTransitionTime"),
            },
        )
        # The Pod's own condition may lack a reason; KubeVirt copies it as it is.
        for cond in vmi["status"]["conditions"]:
            if cond["type"] == READY:
                for key in [k for k, v in cond.items() if v is None]:
                    del cond[key]


def check_failure(vmi: Object, sync_error: SyncError | None, now: str) -> None:
    """Synchronized=False with the error's reason, or no Synchronized condition at all."""
    if sync_error is None:
        remove_condition(vmi, SYNCHRONIZED)
        return
    if condition_has(vmi, SYNCHRONIZED, "False", sync_error.reason):
        return
    remove_condition(vmi, SYNCHRONIZED)
    vmi["status"]["conditions"].append(
        {
            "type": SYNCHRONIZED,
            "status": "False",
            "reason": sync_error.reason,
            "message": sync_error.message,
            "lastTransitionTime": now,
        }
    )


def append_phase_transition(old: Object, new: Object, now: str) -> None:
    before = (old.get("status") or {}).get("phase") or ""
    after = (new.get("status") or {}).get("phase") or ""
    if after and after != before:
        new["status"].setdefault("phaseTransitionTimestamps", []).append(
            {"phase": after, "phaseTransitionTimestamp": now}
        )


def _launcher_image(pod: Object) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    return next((x.get("image", "") for x in containers if x.get("name") == c.LAUNCHER_COMPUTE_CONTAINER), "")


def _pod_qos(pod: Object) -> str:
    """The pod's QoS class as its status reports it, or as its spec implies before a kubelet has reported."""
    return str((pod.get("status") or {}).get("qosClass") or qos_class(pod.get("spec") or {}))


def _scheduling(vmi: Object, pod: Object, sync_error: SyncError | None, update: StatusUpdate) -> SyncError | None:
    """A Scheduling VMI with a pod: QoS, PodScheduled, image errors, then hand-over to virt-handler or Failed."""
    status = vmi["status"]
    pod_qos = _pod_qos(pod)
    status["qosClass"] = pod_qos
    scheduled = condition(pod, POD_SCHEDULED)
    if scheduled is not None and scheduled.get("status") == "False":
        if condition(vmi, POD_SCHEDULED) is None:
            status.setdefault("conditions", []).append({k: v for k, v in scheduled.items() if v is not None})
    else:
        remove_condition(vmi, POD_SCHEDULED)
    image = pod_state.image_error(pod)
    if image is not None:
        sync_error = SyncError(image[0], image[1])
    if pod_state.is_ready_for_handover(pod) and not vmi["metadata"].get("deletionTimestamp"):
        dedicated = ((vmi["spec"].get("domain") or {}).get("cpu") or {}).get("dedicatedCpuPlacement")
        if dedicated and pod_qos != "Guaranteed":
            update.warnings.append((FAILED_GUARANTEE, "failed to guarantee pod resources"))
            return SyncError("failed to guarantee pod resources", FAILED_GUARANTEE)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        status["phase"] = c.PHASE_SCHEDULED
        vmi["metadata"].setdefault("labels", {})[c.NODE_NAME_LABEL] = node
        status["nodeName"] = node
        if ((pod.get("metadata") or {}).get("annotations") or {}).get(
            c.MIGRATION_TRANSPORT_UNIX_ANNOTATION
        ) is not None:
            status["migrationTransport"] = "Unix"
    elif pod_state.is_down_or_going_down(pod):
        status["phase"] = c.PHASE_FAILED
    return sync_error


def _release_finalizers(vmi: Object, owned: Sequence[Object], owner_vm_exists: bool) -> None:
    """A final VMI keeps its finalizer until its pods are gone, and the VM's only while the VM exists."""
    finalizers = vmi["metadata"]["finalizers"]
    if not owned:
        for finalizer in (c.LEGACY_VMI_FINALIZER, c.VMI_FINALIZER):
            if finalizer in finalizers:
                finalizers.remove(finalizer)
        vmi["status"].pop("launcherContainerImageVersion", None)
    if not owner_vm_exists and c.VM_CONTROLLER_FINALIZER in finalizers:
        finalizers.remove(c.VM_CONTROLLER_FINALIZER)


def _sync_eviction_condition(vmi: Object, now: str) -> None:
    if not vmi["status"].get("evacuationNodeName"):
        remove_condition(vmi, EVICTION_REQUESTED)
    elif not condition_has(vmi, EVICTION_REQUESTED, "True"):
        update_condition(
            vmi,
            {
                "type": EVICTION_REQUESTED,
                "status": "True",
                "reason": EVICTION_REQUESTED,
                "message": "VMI is marked for eviction",
                "lastProbeTime": now,
                "lastTransitionTime": now,
            },
        )


def vmi_status(
    cached: Object,
    pod: Object | None,
    owned: Sequence[Object],
    sync_error: SyncError | None,
    *,
    owner_vm_exists: bool,
    now: str,
) -> StatusUpdate:
    """The VMI's next status from the VMI as cached, its current pod, all pods it owns and this sync's error.

    Only the metadata and status are the result's own: the spec, which nothing here changes, is the cached one.
    """
    new = {**cached, "metadata": copy_json(cached["metadata"])}
    if "status" in cached:
        new["status"] = copy_json(cached["status"])
    update = StatusUpdate(new, handler_owned=False)
    status = new.setdefault("status", {})
    phase = status.get("phase") or ""
    finalizers = new["metadata"].setdefault("finalizers", [])
    if c.LEGACY_VMI_FINALIZER in finalizers:
        finalizers.remove(c.LEGACY_VMI_FINALIZER)
        if c.VMI_FINALIZER not in finalizers:
            finalizers.append(c.VMI_FINALIZER)
    if owned or status.get("activePods") is not None:
        status["activePods"] = {p["metadata"]["uid"]: (p.get("spec") or {}).get("nodeName", "") for p in owned}
    sync_ready_condition(new, pod, now)
    if pod is not None:
        status["launcherContainerImageVersion"] = _launcher_image(pod)
    unprocessed = phase in ("", c.PHASE_PENDING)
    if unprocessed and pod is None and not new["metadata"].get("deletionTimestamp") and waits_for_sync(new):
        status["phase"] = c.PHASE_WAITING_FOR_SYNC
    elif phase == c.PHASE_WAITING_FOR_SYNC:
        if new["metadata"].get("deletionTimestamp"):
            release_waiting_finalizers(new, owner_vm_exists)
        elif pod is not None:
            status["phase"] = c.PHASE_SCHEDULING
    elif phase in ("", c.PHASE_PENDING):
        if pod is not None:
            status["phase"] = c.PHASE_SCHEDULING
            # Known from the pod's spec already: set with the move to Scheduling rather than in a write of its own.
            status["qosClass"] = _pod_qos(pod)
        elif new["metadata"].get("deletionTimestamp"):
            status["phase"] = c.PHASE_FAILED
        else:
            status["phase"] = c.PHASE_PENDING
    elif phase == c.PHASE_SCHEDULING:
        remove_condition(new, PROVISIONING)
        if pod is None:
            status["phase"] = c.PHASE_FAILED
        else:
            sync_error = _scheduling(new, pod, sync_error, update)
    elif phase in c.FINAL_PHASES:
        _release_finalizers(new, owned, owner_vm_exists)
    elif phase in HANDLER_PHASES and pod is None:
        status["phase"] = c.PHASE_FAILED
    elif phase == c.PHASE_RUNNING and pod is not None and not pod_state.is_down_or_going_down(pod):
        sync_hotplug_conditions(new)
    if not finalizers:
        del new["metadata"]["finalizers"]
    _sync_eviction_condition(new, now)
    if phase in HANDLER_PHASES:
        update.handler_owned = True
        return update
    check_failure(new, sync_error, now)
    append_phase_transition(cached, new, now)
    return update


def unpaused_gate_condition(vmi: Object, pod: Object, now: str) -> dict[str, Any] | None:
    """The pod's unpaused readiness gate as the VMI's Paused condition wants it; None if the pod already has it.

    A paused VMI is not Ready: the gate holds the pod's Ready condition False while the guest is paused.
    """
    paused = condition_has(vmi, "Paused", "True")
    current = condition(pod, c.UNPAUSED_READINESS_GATE)
    if paused and (current is None or current.get("status") == "True"):
        wanted = {"status": "False", "reason": "Paused", "message": "the virtual machine is paused"}
    elif not paused and (current is None or current.get("status") != "True"):
        wanted = {"status": "True", "reason": "NotPaused", "message": "the virtual machine is not paused"}
    else:
        return None
    return {"type": c.UNPAUSED_READINESS_GATE, **wanted, "lastProbeTime": now, "lastTransitionTime": now}
