"""The VirtualMachineInstance controller: creates the virt-launcher Pod and moves the VMI Pending → Scheduling →
Scheduled (hand-over to virt-handler), or to Failed when the pod goes away; mirrors pod state onto the VMI.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.objects import condition, condition_has
from pykubevirt.api.pod_qos import qos_class
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result, controller_owner_key
from pykubevirt.client.errors import ApiError, Conflict, Invalid, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.expectations import ControllerExpectations
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import PODS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.controller import pod_state
from pykubevirt.controller.launcher_pod import LauncherSettings, render_launcher_pod
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.vmi")

POD_OWNER_INDEX = "controller-uid"
FAILED_CREATE_POD = "FailedCreate"
SUCCESSFUL_CREATE_POD = "SuccessfulCreate"
FAILED_DELETE_POD = "FailedDelete"
SUCCESSFUL_DELETE_POD = "SuccessfulDelete"
FAILED_GUARANTEE = "FailedGuaranteeResources"
READY = "Ready"
SYNCHRONIZED = "Synchronized"
POD_SCHEDULED = "PodScheduled"
PROVISIONING = "Provisioning"
# VMIs in these phases belong to virt-handler; the controller only patches conditions, pods and phase on them.
HANDLER_PHASES = (c.PHASE_SCHEDULED, c.PHASE_RUNNING)


def controller_uid_index(obj: Object) -> list[str]:
    return [str(r["uid"]) for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")]


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
        set_false("GuestNotRunning", "Guest VM is not reported as running")
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


class VMIController:
    """Reconciles one VirtualMachineInstance key at a time."""

    def __init__(
        self,
        client: KubeClient,
        *,
        vmis: Informer,
        pods: Informer,
        vms: Informer,
        recorder: EventRecorder,
        settings: LauncherSettings,
        clock: Any = now_rfc3339,
    ) -> None:
        self.client = client
        self.vmis = vmis
        self.pods = pods
        self.vms = vms
        self.recorder = recorder
        self.settings = settings
        self.clock = clock
        self.pod_expectations = ControllerExpectations()

    # ------------------------------------------------------------------------------------------------ events

    def on_pod_add(self, pod: Object) -> None:
        if key := controller_owner_key(pod, c.VMI_KIND):
            self.pod_expectations.creation_observed(key)

    def on_pod_delete(self, pod: Object) -> None:
        if key := controller_owner_key(pod, c.VMI_KIND):
            self.pod_expectations.deletion_observed(key)

    # ------------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        cached = self.vmis.get(key)
        if cached is None:
            self.pod_expectations.delete(key)
            return None
        if not self.pod_expectations.satisfied(key):
            return Result(requeue_after=5.0)
        owned = self.pods.by_index(POD_OWNER_INDEX, cached["metadata"]["uid"])
        pod = pod_state.current_pod(cached, owned)
        sync_error, pod = await self._sync(cached, pod, owned, key)
        await self._update_status(cached, pod, owned, sync_error)
        if sync_error is not None:
            raise sync_error
        return None

    async def _sync(
        self, vmi: Object, pod: Object | None, owned: list[Object], key: str
    ) -> tuple[SyncError | None, Object | None]:
        meta = vmi["metadata"]
        phase = (vmi.get("status") or {}).get("phase") or ""
        if meta.get("deletionTimestamp"):
            for candidate in owned:
                if candidate["metadata"].get("deletionTimestamp") and not pod_state.pod_is_down(candidate):
                    continue
                try:
                    await self._delete_pod(key, candidate)
                except ApiError as exc:
                    self.recorder.event(
                        vmi,
                        WARNING,
                        FAILED_DELETE_POD,
                        f"Failed to delete virtual machine pod {candidate['metadata']['name']}",
                    )
                    return SyncError(f"failed to delete pod: {exc.message}", FAILED_DELETE_POD), pod
                self.recorder.event(
                    vmi, NORMAL, SUCCESSFUL_DELETE_POD, f"Deleted virtual machine pod {candidate['metadata']['name']}"
                )
            return None, pod
        if phase in c.FINAL_PHASES:
            return None, pod
        if pod is None:
            if phase not in ("", c.PHASE_PENDING):
                return None, pod
            return await self._create_pod(vmi, key)
        return None, pod

    async def _create_pod(self, vmi: Object, key: str) -> tuple[SyncError | None, Object | None]:
        try:
            template = render_launcher_pod(vmi, self.settings)
        except (ValueError, KeyError) as exc:
            return SyncError(f"failed to render launch manifest: {exc}", FAILED_CREATE_POD), None
        try:
            with self.pod_expectations.creating(key):
                pod = await self.client.create(PODS, template, vmi["metadata"]["namespace"])
        except ApiError as exc:
            self.recorder.event(vmi, WARNING, FAILED_CREATE_POD, f"Error creating pod: {exc.message}")
            return SyncError(f"failed to create virtual machine pod: {exc.message}", FAILED_CREATE_POD), None
        log.info("created virt-launcher pod %s", pod["metadata"]["name"], extra=object_fields(vmi))
        self.recorder.event(
            vmi, NORMAL, SUCCESSFUL_CREATE_POD, f"Created virtual machine pod {pod['metadata']['name']}"
        )
        return None, pod

    async def _delete_pod(self, key: str, pod: Object) -> None:
        with contextlib.suppress(NotFound), self.pod_expectations.deleting(key):
            await self.client.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])

    # ------------------------------------------------------------------------------------------------ status

    def _has_owner_vm(self, vmi: Object) -> bool:
        for ref in vmi["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == c.VM_KIND:
                vm = self.vms.get_by_name(vmi["metadata"]["namespace"], ref["name"])
                return vm is not None and vm["metadata"].get("uid") == ref.get("uid")
        return False

    async def _update_status(
        self, cached: Object, pod: Object | None, owned: list[Object], sync_error: SyncError | None
    ) -> None:
        now = self.clock()
        new = copy_json(cached)
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
            image = next(
                (
                    x.get("image", "")
                    for x in (pod.get("spec") or {}).get("containers") or []
                    if x.get("name") == c.LAUNCHER_COMPUTE_CONTAINER
                ),
                "",
            )
            status["launcherContainerImageVersion"] = image
            await self._sync_paused_condition_to_pod(new, pod)
        if phase in ("", c.PHASE_PENDING):
            if pod is not None:
                status["phase"] = c.PHASE_SCHEDULING
            elif new["metadata"].get("deletionTimestamp"):
                status["phase"] = c.PHASE_FAILED
            else:
                status["phase"] = c.PHASE_PENDING
        elif phase == c.PHASE_SCHEDULING:
            remove_condition(new, PROVISIONING)
            if pod is None:
                status["phase"] = c.PHASE_FAILED
            else:
                sync_error = self._scheduling(new, pod, sync_error)
        elif phase in c.FINAL_PHASES:
            if not owned:
                for finalizer in (c.LEGACY_VMI_FINALIZER, c.VMI_FINALIZER):
                    if finalizer in finalizers:
                        finalizers.remove(finalizer)
                status.pop("launcherContainerImageVersion", None)
            if not self._has_owner_vm(new) and c.VM_CONTROLLER_FINALIZER in finalizers:
                finalizers.remove(c.VM_CONTROLLER_FINALIZER)
        elif phase in HANDLER_PHASES and pod is None:
            status["phase"] = c.PHASE_FAILED
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        if status.get("evacuationNodeName"):
            if not condition_has(new, "EvictionRequested", "True"):
                update_condition(
                    new,
                    {
                        "type": "EvictionRequested",
                        "status": "True",
                        "reason": "EvictionRequested",
                        "message": "VMI is marked for eviction",
                        "lastProbeTime": now,
                        "lastTransitionTime": now,
                    },
                )
        else:
            remove_condition(new, "EvictionRequested")
        if phase in HANDLER_PHASES:
            await self._patch(cached, new)
            return
        check_failure(new, sync_error, now)
        append_phase_transition(cached, new, now)
        if new != cached:
            await self._write(new)

    def _scheduling(self, vmi: Object, pod: Object, sync_error: SyncError | None) -> SyncError | None:
        status = vmi["status"]
        pod_qos = (pod.get("status") or {}).get("qosClass") or qos_class(pod.get("spec") or {})
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
                self.recorder.event(vmi, WARNING, FAILED_GUARANTEE, "failed to guarantee pod resources")
                return SyncError("failed to guarantee pod resources", FAILED_GUARANTEE)
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            status["phase"] = c.PHASE_SCHEDULED
            vmi["metadata"].setdefault("labels", {})[c.NODE_NAME_LABEL] = node
            status["nodeName"] = node
            if (pod["metadata"].get("annotations") or {}).get(c.MIGRATION_TRANSPORT_UNIX_ANNOTATION) is not None:
                status["migrationTransport"] = "Unix"
        elif pod_state.is_down_or_going_down(pod):
            status["phase"] = c.PHASE_FAILED
        return sync_error

    async def _sync_paused_condition_to_pod(self, vmi: Object, pod: Object) -> None:
        """Keep the pod's readiness gate in step with the VMI's Paused condition (a paused VMI is not Ready)."""
        paused = condition_has(vmi, "Paused", "True")
        current = condition(pod, c.UNPAUSED_READINESS_GATE)
        if paused and (current is None or current.get("status") == "True"):
            wanted = {"status": "False", "reason": "Paused", "message": "the virtual machine is paused"}
        elif not paused and (current is None or current.get("status") != "True"):
            wanted = {"status": "True", "reason": "NotPaused", "message": "the virtual machine is not paused"}
        else:
            return
        now = self.clock()
        gate = {"type": c.UNPAUSED_READINESS_GATE, **wanted, "lastProbeTime": now, "lastTransitionTime": now}
        conditions = [
            x for x in (pod.get("status") or {}).get("conditions") or [] if x.get("type") != c.UNPAUSED_READINESS_GATE
        ]
        conditions.append(gate)
        patch = {"status": {"conditions": conditions}}
        try:
            await self.client.patch(
                PODS, pod["metadata"]["name"], patch, pod["metadata"]["namespace"], subresource="status"
            )
        except NotFound:
            return

    async def _write(self, vmi: Object) -> None:
        try:
            await self.client.update(VIRTUAL_MACHINE_INSTANCES, vmi)
        except NotFound:
            return
        except Conflict:
            # The cache was stale; the newer version arrives as an event and is reconciled then.
            return

    async def _patch(self, old: Object, new: Object) -> None:
        """Patch only what the controller owns on a VMI virt-handler is driving (KubeVirt's prepareVMIPatch)."""
        ops: list[dict[str, Any]] = []
        old_status = old.get("status") or {}
        new_status = new.get("status") or {}
        for field in ("conditions", "activePods", "phase", "launcherContainerImageVersion"):
            before, after = old_status.get(field), new_status.get(field)
            if before == after or after is None:
                continue
            if before is None:
                ops.append({"op": "add", "path": f"/status/{field}", "value": after})
            else:
                ops.append({"op": "test", "path": f"/status/{field}", "value": before})
                ops.append({"op": "replace", "path": f"/status/{field}", "value": after})
        for field in ("labels", "finalizers"):
            before, after = old["metadata"].get(field), new["metadata"].get(field)
            if before == after:
                continue
            if before is None:
                ops.append({"op": "add", "path": f"/metadata/{field}", "value": after})
            elif after is None:
                ops.append({"op": "test", "path": f"/metadata/{field}", "value": before})
                ops.append({"op": "remove", "path": f"/metadata/{field}"})
            else:
                ops.append({"op": "test", "path": f"/metadata/{field}", "value": before})
                ops.append({"op": "replace", "path": f"/metadata/{field}", "value": after})
        if not ops:
            return
        if "status" not in old:
            ops = [{"op": "add", "path": "/status", "value": {}}, *ops]
        try:
            await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES,
                new["metadata"]["name"],
                ops,
                new["metadata"]["namespace"],
                patch_type=JSON_PATCH,
            )
        except (NotFound, Invalid):
            # A failed `test` means the VMI changed under us; the change arrives as an event.
            return
