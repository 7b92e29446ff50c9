"""The VirtualMachineInstance controller: creates the virt-launcher Pod and moves the VMI Pending → Scheduling →
Scheduled (hand-over to virt-handler), or to Failed when the pod goes away; mirrors pod state onto the VMI.
"""

from __future__ import annotations

import logging
from typing import Any

from pykubevirt.api import backend_storage as bs
from pykubevirt.api import constants as c
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import JSON_PATCH, STRATEGIC_MERGE_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result, controller_owner_key
from pykubevirt.client.errors import ApiError, Conflict, Invalid, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.expectations import ControllerExpectations
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import PODS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.controller import pod_state
from pykubevirt.controller.backend_storage import BackendStorage
from pykubevirt.controller.hotplug_claims import HotplugClaims
from pykubevirt.controller.launcher_pod import LauncherSettings, launcher_pod_selector, render_launcher_pod
from pykubevirt.controller.migration_receiver import waits_for_sync
from pykubevirt.controller.multus_annotations import sync_multus_status
from pykubevirt.controller.status_coalescing import HeldWrites, only_details_changed
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.controller.vmi_status import unpaused_gate_condition, vmi_status
from pykubevirt.controller.volume_status import (
    DATA_VOLUMES_READY,
    claim_names,
    data_volumes_pending,
    data_volumes_ready,
    volume_statuses,
)
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.vmi")

POD_OWNER_INDEX = "controller-uid"
FAILED_CREATE_POD = "FailedCreate"
FAILED_PVC_NOT_FOUND = "FailedPvcNotFound"
SUCCESSFUL_CREATE_POD = "SuccessfulCreate"
FAILED_DELETE_POD = "FailedDelete"
SUCCESSFUL_DELETE_POD = "SuccessfulDelete"
# Status the controller keeps for itself and for virt-handler, which reads it only once the VMI is Scheduled.
BOOKKEEPING_FIELDS = ("activePods", "qosClass")


def controller_uid_index(obj: Object) -> list[str]:
    return [str(r["uid"]) for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")]


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
        claims: Informer | None = None,
        data_volumes: Informer | None = None,
        storage_classes: Informer | None = None,
        clock: Any = now_rfc3339,
    ) -> None:
        self.client = client
        self.vmis = vmis
        self.pods = pods
        self.vms = vms
        self.claims = claims
        self.data_volumes = data_volumes
        self.recorder = recorder
        self.settings = settings
        self.clock = clock
        self.pod_expectations = ControllerExpectations()
        # VMIs whose last pod create failed with its connection, so whether the pod exists is unknown.
        self._ambiguous_creates: set[str] = set()
        self.held_status = HeldWrites()
        # Persistent EFI/TPM state needs claims to be watched; without them such a VMI's state stays in its pod.
        self.backend_storage = BackendStorage(client, claims, storage_classes) if claims is not None else None
        self.hotplug_claims = HotplugClaims(client, claims, storage_classes) if claims is not None else None

    # ------------------------------------------------------------------------------------------------ events

    def on_pod_add(self, pod: Object) -> None:
        if key := controller_owner_key(pod, c.VMI_KIND):
            if pod["metadata"].get("deletionTimestamp"):
                # Seen first already going (after a relist): not the creation this controller waits for.
                self.on_pod_delete(pod)
            else:
                self.pod_expectations.creation_observed(key)

    def on_pod_update(self, old: Object, new: Object) -> None:
        # A pod marked for deletion counts as deleted (KubeVirt's updatePod): its VMI's status follows the pod
        # while it terminates, instead of waiting for it to be gone.
        if new["metadata"].get("deletionTimestamp"):
            self.on_pod_delete(new)

    def on_pod_delete(self, pod: Object) -> None:
        if key := controller_owner_key(pod, c.VMI_KIND):
            self.pod_expectations.deletion_observed(key, object_key(pod))

    # ------------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        cached = self.vmis.get(key)
        if cached is None:
            self.pod_expectations.delete(key)
            self.held_status.release(key)
            return None
        if not self.pod_expectations.satisfied(key):
            return Result(requeue_after=5.0)
        owned = self.pods.by_index(POD_OWNER_INDEX, cached["metadata"]["uid"])
        pod = pod_state.current_pod(cached, owned)
        sync_error, pod = await self._sync(cached, pod, owned, key)
        if pod is not None and all(p["metadata"]["uid"] != pod["metadata"]["uid"] for p in owned):
            # The pod this sync created is not in the cache yet; counting it now saves the VMI a write for it.
            owned = [*owned, pod]
        held = await self._update_status(key, cached, pod, owned, sync_error)
        if sync_error is not None:
            raise sync_error
        return Result(requeue_after=held) if held is not None else None

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
                    deleted = await self._delete_pod(key, candidate)
                except ApiError as exc:
                    self.recorder.event(
                        vmi,
                        WARNING,
                        FAILED_DELETE_POD,
                        f"Failed to delete virtual machine pod {candidate['metadata']['name']}",
                    )
                    return SyncError(f"failed to delete pod: {exc.message}", FAILED_DELETE_POD), pod
                if deleted and not candidate["metadata"].get("deletionTimestamp"):
                    # A finished pod already going is deleted once more to remove it at once; that is no news.
                    self.recorder.event(
                        vmi,
                        NORMAL,
                        SUCCESSFUL_DELETE_POD,
                        f"Deleted virtual machine pod {candidate['metadata']['name']}",
                    )
            return None, pod
        if phase in c.FINAL_PHASES:
            return None, pod
        if pod is None:
            # A receiver waits for a migration to bring its domain; it starts no launcher of its own.
            if phase not in ("", c.PHASE_PENDING) or waits_for_sync(vmi):
                return None, pod
            return await self._create_pod(vmi, key)
        return None, pod

    def _claim(self, key: str) -> Object | None:
        return self.claims.get(key) if self.claims is not None else None

    def _data_volume(self, key: str) -> Object | None:
        return self.data_volumes.get(key) if self.data_volumes is not None else None

    def _claims_of(self, vmi: Object) -> dict[str, Object] | None:
        """The VMI's claims by name (None when claims are not watched: all are then filesystem claims)."""
        if self.claims is None:
            return None
        namespace = vmi["metadata"]["namespace"]
        found = {}
        for name in claim_names(vmi):
            if (pvc := self.claims.get(f"{namespace}/{name}")) is not None:
                found[name] = pvc
        return found

    async def _create_pod(self, vmi: Object, key: str) -> tuple[SyncError | None, Object | None]:
        if data_volumes_pending(vmi, self._data_volume):
            return None, None  # populated first; a DataVolume event brings the VMI back
        claims = self._claims_of(vmi)
        missing = [name for name in claim_names(vmi) if claims is not None and name not in claims]
        if missing:
            # The claim may still come: wait for it (a claim event requeues the VMI) rather than fail.
            namespace = vmi["metadata"]["namespace"]
            message = f"PVC {namespace}/{missing[0]} does not exist, waiting for it to appear"
            self.recorder.event(vmi, WARNING, FAILED_PVC_NOT_FOUND, message)
            return SyncError(message, FAILED_PVC_NOT_FOUND), None
        backend_claim = ""
        if self.backend_storage is not None:
            try:
                ensured = await self.backend_storage.ensure(vmi, key, self.settings.cluster.vm_state_storage_class)
            except SyncError as exc:
                return exc, None
            if ensured is None:
                return None, None  # the claim's add event brings the VMI back
            backend_claim = ensured
        try:
            template = render_launcher_pod(vmi, self.settings, pvcs=claims, backend_claim=backend_claim)
        except (ValueError, KeyError) as exc:
            return SyncError(f"failed to render launch manifest: {exc}", FAILED_CREATE_POD), None
        namespace = vmi["metadata"]["namespace"]
        if key in self._ambiguous_creates:
            # The last create's answer was lost with its connection: the API server may have stored the pod without
            # the informer having shown it yet. Ask the server itself before making a second launcher pod.
            listed = await self.client.list(PODS, namespace, label_selector=launcher_pod_selector(vmi))
            self._ambiguous_creates.discard(key)
            if any(not p["metadata"].get("deletionTimestamp") for p in listed.get("items") or []):
                # The informer brings the pod, and the VMI back with it. Until then (it may still be re-listing after
                # the server came back) expect it, or the VMI's next event would make a second pod. Nothing awaits
                # between this look at the cache and the expectation, so the pod's add cannot fall between them.
                if not self.pods.by_index(POD_OWNER_INDEX, vmi["metadata"]["uid"]):
                    self.pod_expectations.expect_creations(key)
                return None, None
        try:
            with self.pod_expectations.creating(key):
                pod = await self.client.create(PODS, template, namespace)
        except OSError:
            self._ambiguous_creates.add(key)
            raise
        except ApiError as exc:
            self.recorder.event(vmi, WARNING, FAILED_CREATE_POD, f"Error creating pod: {exc.message}")
            return SyncError(f"failed to create virtual machine pod: {exc.message}", FAILED_CREATE_POD), None
        log.info("created virt-launcher pod %s", pod["metadata"]["name"], extra=object_fields(vmi))
        self.recorder.event(
            vmi, NORMAL, SUCCESSFUL_CREATE_POD, f"Created virtual machine pod {pod['metadata']['name']}"
        )
        return None, pod

    async def _delete_pod(self, key: str, pod: Object) -> bool:
        """Delete the pod; False if it was already gone."""
        try:
            with self.pod_expectations.deleting(key, object_key(pod)):
                await self.client.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
        except NotFound:
            return False
        return True

    # ------------------------------------------------------------------------------------------------ status

    def _has_owner_vm(self, vmi: Object) -> bool:
        for ref in vmi["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == c.VM_KIND:
                vm = self.vms.get_by_name(vmi["metadata"]["namespace"], ref["name"])
                return vm is not None and vm["metadata"].get("uid") == ref.get("uid")
        return False

    async def _update_status(
        self, key: str, cached: Object, pod: Object | None, owned: list[Object], sync_error: SyncError | None
    ) -> float | None:
        """Write what `vmi_status` computes, the pod's unpaused gate first; returns when to look at a held change."""
        now = self.clock()
        update = vmi_status(cached, pod, owned, sync_error, owner_vm_exists=self._has_owner_vm(cached), now=now)
        if self.claims is not None and (cached.get("spec") or {}).get("volumes"):
            statuses = volume_statuses(update.vmi, self._claim)
            if self.hotplug_claims is not None and any(s.get("phase") == "Pending" for s in statuses):
                await self.hotplug_claims.place(update.vmi)
            before = {s.get("name"): s.get("phase") for s in (update.vmi.get("status") or {}).get("volumeStatus") or []}
            if statuses != (update.vmi.get("status") or {}).get("volumeStatus"):
                update.vmi.setdefault("status", {})["volumeStatus"] = statuses
            for entry in statuses:
                # KubeVirt records the move to AttachedToNode (its attachment pod's creation) as an event.
                if entry.get("phase") == "AttachedToNode" and before.get(entry["name"]) != "AttachedToNode":
                    self.recorder.event(update.vmi, NORMAL, str(entry["reason"]), str(entry["message"]))
        if self.backend_storage is not None and (pvc := self.backend_storage.claim_of(update.vmi)) is not None:
            status = update.vmi.setdefault("status", {})
            statuses = bs.with_volume_status(list(status.get("volumeStatus") or []), pvc)
            if statuses != status.get("volumeStatus"):
                status["volumeStatus"] = statuses
        condition = data_volumes_ready(update.vmi, self._data_volume, now) if self.data_volumes is not None else None
        if condition is not None:
            status = update.vmi.setdefault("status", {})
            others = [c for c in status.get("conditions") or [] if c.get("type") != DATA_VOLUMES_READY]
            current = [c for c in status.get("conditions") or [] if c.get("type") == DATA_VOLUMES_READY]
            if current != [condition]:
                status["conditions"] = [*others, condition]
        if pod is not None:
            await self._sync_paused_condition_to_pod(cached, pod, now)
            sync_multus_status(update.vmi, pod)
        for reason, message in update.warnings:
            self.recorder.event(update.vmi, WARNING, reason, message)
        if update.handler_owned:
            await self._patch(cached, update.vmi)
        elif update.vmi == cached:
            self.held_status.release(key)
        elif (
            update.vmi["metadata"] == cached["metadata"]
            and only_details_changed(cached.get("status") or {}, update.vmi["status"], BOOKKEEPING_FIELDS)
            and (held := self.held_status.hold(key)) is not None
        ):
            # Say the pod got its node while the VMI is Scheduling: the hand-over to Scheduled writes that too.
            return held
        else:
            await self._write(update.vmi)
            self.held_status.release(key)
        return None

    async def _sync_paused_condition_to_pod(self, vmi: Object, pod: Object, now: str) -> None:
        """Keep the pod's readiness gate in step with the VMI's Paused condition (a paused VMI is not Ready)."""
        gate = unpaused_gate_condition(vmi, pod, now)
        if gate is None:
            return
        # A strategic merge patch of the one condition, as upstream's syncPausedConditionToPod sends: conditions merge
        # by type, so the kubelet's conditions written meanwhile stay, and no precondition can make it fail.
        try:
            await self.client.patch(
                PODS,
                pod["metadata"]["name"],
                {"status": {"conditions": [gate]}},
                pod["metadata"]["namespace"],
                patch_type=STRATEGIC_MERGE_PATCH,
                subresource="status",
            )
        except (NotFound, Invalid):
            return

    async def _write(self, vmi: Object) -> None:
        try:
            replaced = vmi["metadata"]["resourceVersion"]
            self.vmis.wrote(await self.client.update(VIRTUAL_MACHINE_INSTANCES, vmi), replaced)
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
        for field in (
            "conditions",
            "activePods",
            "phase",
            "launcherContainerImageVersion",
            "volumeStatus",
            "interfaces",
        ):
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
            patched = await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES,
                new["metadata"]["name"],
                ops,
                new["metadata"]["namespace"],
                patch_type=JSON_PATCH,
            )
        except (NotFound, Invalid):
            # A failed `test` means the VMI changed under us; the change arrives as an event.
            return
        self.vmis.wrote(patched, old["metadata"]["resourceVersion"])
