"""KubeVirt's VirtualMachineRestore controller: a VM put back as a snapshot recorded it, on claims made from it.

After `pkg/storage/snapshot/restore.go`. Once the target VM is stopped (as `targetReadinessPolicy` says), the VM is
marked `status.restoreInProgress`, a claim is made from each VolumeSnapshot of the snapshot's content, the VM (made
when missing) gets the snapshot's spec on those claims, DataVolume templates are taken over by DataVolumes that adopt
the restored claims, and the restore is Complete.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.finalizer_patch import finalizers_patch
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_patch import apply_patch
from pykubevirt.api.timestamps import format_time, parse_time
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import (
    DATA_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    VIRTUAL_MACHINES,
    VM_RESTORES,
)
from pykubevirt.controller import snapshot_instancetype_revisions as instancetype_revisions
from pykubevirt.controller import vm_restore_plan as plan
from pykubevirt.controller import vm_snapshot_status as st
from pykubevirt.controller.restore_backend_storage import RestoreBackendError, RestoredBackendClaims, restored_entry
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.restore")

SUBRESOURCES = f"/apis/{c.SUBRESOURCES_GROUP}/v1"


# The restore informer's indexes (`namespace/name`): every VM, VMI, claim and DataVolume event asks them.
TARGET_INDEX = "target-vm"
CLAIM_INDEX = "restored-claims"


def _key(obj: Object) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def target_key(restore: Object) -> list[str]:
    name = ((restore.get("spec") or {}).get("target") or {}).get("name")
    return [f"{restore['metadata'].get('namespace', '')}/{name}"] if name else []


def restored_claim_keys(restore: Object) -> list[str]:
    """The claims and DataVolumes an unfinished restore makes."""
    if not _progressing(restore):
        return []
    namespace = restore["metadata"].get("namespace", "")
    names = {
        name
        for entry in (restore.get("status") or {}).get("restores") or []
        for name in (entry.get("persistentVolumeClaim"), entry.get("dataVolumeName"))
        if name
    }
    return [f"{namespace}/{name}" for name in sorted(names)]


class RestoreError(Exception):
    """Why the restore cannot go on now; it goes into the conditions and an event, and the restore is retried."""


def _now() -> str:
    return format_time(datetime.now(UTC))


def _progressing(restore: Object) -> bool:
    status = restore.get("status") or {}
    failed = any(cond.get("type") == st.FAILURE for cond in status.get("conditions") or [])
    return status.get("complete") is not True and not failed


class VMRestoreController:
    """Reconciles VirtualMachineRestores (keys `namespace/name`)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        restores: Informer,
        snapshots: Informer,
        contents: Informer,
        vms: Informer,
        vmis: Informer,
        pvcs: Informer,
        data_volumes: Informer,
        storage_classes: Informer,
        revisions: Informer,
        volume_snapshots: Informer | None,
        recorder: EventRecorder,
    ) -> None:
        self.client = client
        self.restores = restores
        self.snapshots = snapshots
        self.contents = contents
        self.vms = vms
        self.vmis = vmis
        self.pvcs = pvcs
        self.data_volumes = data_volumes
        self.storage_classes = storage_classes
        self.revisions = revisions
        self.volume_snapshots = volume_snapshots
        self.recorder = recorder
        self.backend_claims = RestoredBackendClaims(client, pvcs)
        restores.add_indexer(TARGET_INDEX, target_key)
        restores.add_indexer(CLAIM_INDEX, restored_claim_keys)

    def keys_for_target(self, obj: Object) -> list[str]:
        """Restores whose target is this VM (or whose VMI this is): its stop or update moves them on."""
        return [_key(r) for r in self.restores.by_index(TARGET_INDEX, _key(obj))]

    def keys_for_claim(self, obj: Object) -> list[str]:
        """Unfinished restores whose restored claims (or DataVolumes) this is."""
        return [_key(r) for r in self.restores.by_index(CLAIM_INDEX, _key(obj))]

    async def reconcile(self, key: str) -> Result | None:
        restore = self.restores.get(key)
        if restore is None:
            return None
        try:
            wait = await self._update(copy_json(restore))
        except RestoreError as exc:
            await self._record_error(copy_json(restore), str(exc))
            return Result(requeue_after=5.0)
        except Conflict:
            return Result(requeue_after=0.2)
        return None if wait is None else Result(requeue_after=wait)

    # ------------------------------------------------------------------------------------------------ flow

    async def _update(self, restore: Object) -> float | None:
        """One pass; returns when to look again while a running target's grace period runs (else None)."""
        original = copy_json(restore)
        if restore.get("status") is None:
            restore["status"] = {"complete": False, "conditions": []}
            self._conditions(restore, progressing=True, ready=False, reason="Initializing VirtualMachineRestore")
            await self._write_status(original, restore)
            return None
        namespace = restore["metadata"]["namespace"]
        target_name = str(((restore.get("spec") or {}).get("target") or {}).get("name", ""))
        target = self._copy(self.vms.get(f"{namespace}/{target_name}"))
        if st.deleting(restore):
            await self._delete(restore, target)
            return None
        if not _progressing(restore):
            return None
        meta_before = copy_json(restore["metadata"])
        if not restore["metadata"].get("ownerReferences") and target is not None:
            restore["metadata"]["ownerReferences"] = [plan.vm_owner_reference(target)]
        if plan.RESTORE_FINALIZER not in (restore["metadata"].get("finalizers") or []):
            restore["metadata"]["finalizers"] = [*(restore["metadata"].get("finalizers") or []), plan.RESTORE_FINALIZER]
        if restore["metadata"] != meta_before:
            restore = await self.client.update(VM_RESTORES, restore)
            original = copy_json(restore)
        if target is not None and self.vmis.get(f"{namespace}/{target_name}") is not None:
            return await self._target_not_ready(original, restore, target)
        snapshot = self._snapshot(restore)
        if target is not None and not plan.has_last_restore(restore, target):
            source_uid = (snapshot.get("status") or {}).get("sourceUID")
            if source_uid is not None and source_uid != target["metadata"].get("uid"):
                raise RestoreError(plan.RESTORE_TO_EXISTING_TARGET)
        if target is not None and not plan.has_last_restore(restore, target):
            target = await self._mark_in_progress(restore, target)
        content = self._content(snapshot)
        if await self._reconcile_claims(restore, content):
            self._conditions(
                restore, progressing=True, ready=False, reason="Creating new PVCs", ready_reason="Waiting for new PVCs"
            )
            await self._write_status(original, restore)
            return None
        if await self._reconcile_target(restore, target, content):
            self._conditions(
                restore,
                progressing=True,
                ready=False,
                reason="Updating target spec",
                ready_reason="Waiting for target update",
            )
            await self._write_status(original, restore)
            return None
        for name in (restore.get("status") or {}).get("deletedDataVolumes") or []:
            if self.data_volumes.get(f"{namespace}/{name}") is not None:
                try:
                    await self.client.delete(DATA_VOLUMES, name, namespace)
                except NotFound:
                    pass
        target = self._copy(self.vms.get(f"{namespace}/{target_name}")) or target
        if target is None:
            raise RestoreError("At this point target should exist")
        await self.backend_claims.delete_replaced(restore, target)
        await self._done(restore, target)
        self.recorder.event(
            restore,
            NORMAL,
            "VirtualMachineRestoreComplete",
            f"Successfully completed VirtualMachineRestore {restore['metadata']['name']}",
        )
        restore["status"]["complete"] = True
        restore["status"]["restoreTime"] = _now()
        self._conditions(restore, progressing=False, ready=True, reason="Operation complete")
        await self._write_status(original, restore)
        log.info("restore complete", extra=object_fields(restore, target=target_name))
        return None

    @staticmethod
    def _copy(obj: Object | None) -> Object | None:
        return None if obj is None else copy_json(obj)

    def _snapshot(self, restore: Object) -> Object:
        namespace = restore["metadata"]["namespace"]
        key = f"{namespace}/{(restore.get('spec') or {}).get('virtualMachineSnapshotName', '')}"
        snapshot = self.snapshots.get(key)
        if snapshot is None:
            raise RestoreError(f"VMSnapshot {key} does not exist")
        if st.failed(snapshot):
            raise RestoreError(f"VMSnapshot {key} failed and is invalid to use")
        if not st.ready(snapshot):
            raise RestoreError(f"VMSnapshot {key} not ready")
        if not (snapshot.get("status") or {}).get("virtualMachineSnapshotContentName"):
            raise RestoreError(f"no snapshot content name in {key}")
        return snapshot

    def _content(self, snapshot: Object) -> Object:
        key = f"{snapshot['metadata']['namespace']}/{snapshot['status']['virtualMachineSnapshotContentName']}"
        content = self.contents.get(key)
        if content is None:
            raise RestoreError(f"VMSnapshotContent {key} does not exist")
        if not st.ready(content):
            raise RestoreError(f"VMSnapshotContent {key} not ready")
        return content

    async def _target_not_ready(self, original: Object, restore: Object, target: Object) -> float | None:
        """Wait for the target to stop, stop it, or fail, as its targetReadinessPolicy says; the seconds left of the
        grace period, when it runs (nothing else need happen for it to end)."""
        policy = (restore.get("spec") or {}).get("targetReadinessPolicy") or "WaitGracePeriod"
        if policy == "StopTarget":
            self.recorder.event(restore, WARNING, "RestoreTargetNotReady", plan.STOP_TARGET)
            self._conditions(restore, progressing=False, ready=False, reason=plan.STOP_TARGET)
            meta = target["metadata"]
            path = f"{SUBRESOURCES}/namespaces/{meta['namespace']}/virtualmachines/{meta['name']}/stop"
            try:
                await self.client.request("PUT", path, body={})
            except ApiError as exc:
                raise RestoreError(exc.message) from exc
            await self._write_status(original, restore)
            return None
        if policy == "FailImmediate":
            await self._record_error(original, plan.TARGET_NOT_READY_FAILURE, fail=True)
            return None
        left: float | None = None
        if policy == "WaitGracePeriod":
            created = parse_time(restore["metadata"].get("creationTimestamp"))
            elapsed = 0.0 if created is None else (datetime.now(UTC) - created).total_seconds()
            if elapsed > plan.GRACE_PERIOD_SECONDS:
                await self._record_error(original, plan.GRACE_PERIOD_EXCEEDED, fail=True)
                return None
            left = plan.GRACE_PERIOD_SECONDS - elapsed + 0.5
            reason = plan.WAIT_GRACE_PERIOD
        else:
            reason = plan.WAIT_EVENTUALLY
        self.recorder.event(restore, WARNING, "RestoreTargetNotReady", plan.VMI_EXISTS)
        self._conditions(restore, progressing=False, ready=False, reason=reason)
        await self._write_status(original, restore)
        return left

    async def _mark_in_progress(self, restore: Object, target: Object) -> Object:
        current = (target.get("status") or {}).get("restoreInProgress")
        name = restore["metadata"]["name"]
        if current is not None and current != name:
            raise RestoreError(f"vm restore {current} in progress")
        if current is None:
            target.setdefault("status", {})["restoreInProgress"] = name
            target = await self.client.update_status(VIRTUAL_MACHINES, target)
        return target

    async def _done(self, restore: Object, target: Object) -> None:
        status = target.get("status") or {}
        if status.get("restoreInProgress") != restore["metadata"]["name"]:
            return
        status.pop("restoreInProgress", None)
        status.pop("memoryDumpRequest", None)
        target["status"] = status
        await self.client.update_status(VIRTUAL_MACHINES, target)

    async def _delete(self, restore: Object, target: Object | None) -> None:
        original = copy_json(restore)
        finalizers = list(restore["metadata"].get("finalizers") or [])
        if plan.RESTORE_FINALIZER not in finalizers:
            return
        if target is not None:
            await self._done(restore, target)
        self._conditions(restore, progressing=False, ready=False, reason="VM restore is deleting")
        if restore.get("status") != original.get("status"):
            await self._write_status(original, restore)
            return
        meta = restore["metadata"]
        kept = [f for f in finalizers if f != plan.RESTORE_FINALIZER]
        await self.client.patch(
            VM_RESTORES, meta["name"], finalizers_patch(finalizers, kept), meta["namespace"], patch_type=JSON_PATCH
        )

    # ------------------------------------------------------------------------------------------------ claims

    async def _reconcile_claims(self, restore: Object, content: Object) -> bool:
        """Record and create the restored claims; True while there is something to wait for (status changed)."""
        backups = (content.get("spec") or {}).get("volumeBackups") or []
        restores = plan.volume_restores(restore, backups)
        status = restore["status"]
        if restores != (status.get("restores") or []):
            status["restores"] = restores
            return True
        namespace = restore["metadata"]["namespace"]
        source_vm = ((content.get("spec") or {}).get("source") or {}).get("virtualMachine") or {}
        target_name = ((restore.get("spec") or {}).get("target") or {}).get("name", "")
        target = self.vms.get(f"{namespace}/{target_name}")
        waiting = False
        by_volume = {b.get("volumeName"): b for b in backups}
        in_place = (restore.get("spec") or {}).get("volumeRestorePolicy") == "InPlace"
        for entry in status.get("restores") or []:
            name = str(entry["persistentVolumeClaim"])
            pvc = self.pvcs.get(f"{namespace}/{name}")
            if pvc is None:
                await self._create_claim(restore, entry, by_volume[entry["volumeName"]], source_vm, target)
                waiting = True
            elif in_place and not plan.has_last_restore(restore, pvc):
                waiting = True
                if await self._replace_in_place(restore, entry, pvc):
                    continue
            elif (pvc.get("status") or {}).get("phase") == "Pending":
                storage_class = self.storage_classes.get(str((pvc.get("spec") or {}).get("storageClassName") or ""))
                if (storage_class or {}).get("volumeBindingMode", "Immediate") == "Immediate":
                    waiting = True
            elif (pvc.get("status") or {}).get("phase") != "Bound":
                raise RestoreError(f'PVC {namespace}/{name} in status "{(pvc.get("status") or {}).get("phase")}"')
        return waiting

    async def _replace_in_place(self, restore: Object, entry: dict[str, Any], pvc: Object) -> bool:
        """Delete the claim a restore `InPlace` makes again; True when its DataVolume was first recorded instead.

        A claim of a DataVolume keeps the DataVolume: marked prePopulated it waits for the claim made again (KubeVirt's
        prepopulateDataVolume) and takes it over.
        """
        meta = pvc["metadata"]
        owner = next(
            (
                r["name"]
                for r in meta.get("ownerReferences") or []
                if r.get("controller") and r.get("kind") == c.DATA_VOLUME_KIND
            ),
            None,
        )
        if owner is not None:
            if not entry.get("dataVolumeName"):
                entry["dataVolumeName"] = owner
                return True
            annotations = {
                plan.RESTORE_NAME_ANNOTATION: restore["metadata"]["name"],
                plan.PRE_POPULATED_ANNOTATION: owner,
            }
            await self.client.patch(DATA_VOLUMES, owner, {"metadata": {"annotations": annotations}}, meta["namespace"])
        if not meta.get("deletionTimestamp"):
            await self.client.delete(PERSISTENT_VOLUME_CLAIMS, meta["name"], meta["namespace"])
            log.info("deleted claim %s to restore it in place", meta["name"], extra=object_fields(restore))
        return False

    async def _create_claim(
        self, restore: Object, entry: dict[str, Any], backup: dict[str, Any], source_vm: Object, target: Object | None
    ) -> None:
        namespace = restore["metadata"]["namespace"]
        snapshot_name = str(entry.get("volumeSnapshotName") or "")
        volume_snapshot = (
            None if self.volume_snapshots is None else self.volume_snapshots.get(f"{namespace}/{snapshot_name}")
        )
        if volume_snapshot is None:
            raise RestoreError(f"missing volumeSnapshot {snapshot_name}")
        pvc = plan.restore_claim(restore, str(entry["persistentVolumeClaim"]), backup, volume_snapshot, source_vm)
        if entry.get("dataVolumeName"):
            pvc["metadata"]["annotations"][plan.POPULATED_FOR_ANNOTATION] = entry["dataVolumeName"]
        elif (restore.get("spec") or {}).get("volumeOwnershipPolicy") != "None":
            if target is not None:
                pvc["metadata"]["ownerReferences"] = [plan.vm_owner_reference(target)]
            elif plan.owned_by_vm(backup, source_vm):
                pvc["metadata"]["annotations"][plan.OWNED_BY_VM_ANNOTATION] = restore["metadata"]["name"]
        try:
            await self.client.create(PERSISTENT_VOLUME_CLAIMS, pvc, namespace)
        except AlreadyExists:
            return
        log.info("created restored claim %s", pvc["metadata"]["name"], extra=object_fields(restore))

    # ------------------------------------------------------------------------------------------------ target

    async def _reconcile_target(self, restore: Object, target: Object | None, content: Object) -> bool:
        """Bring the target VM to the snapshot's spec; True when this pass changed something to wait for."""
        if target is not None and plan.has_last_restore(restore, target):
            return False
        namespace = restore["metadata"]["namespace"]
        snapshot_vm = ((content.get("spec") or {}).get("source") or {}).get("virtualMachine")
        if not snapshot_vm:
            raise RestoreError("unexpected snapshot source")
        status = restore["status"]
        dv_names = plan.data_volume_names(restore, snapshot_vm)
        changed = False
        for entry in status.get("restores") or []:
            dv_name = dv_names.get(entry.get("volumeName"))
            if dv_name is None or entry.get("dataVolumeName") == dv_name:
                continue
            pvc = self.pvcs.get(f"{namespace}/{entry['persistentVolumeClaim']}")
            if pvc is None:
                raise RestoreError(f"pvc {namespace}/{entry['persistentVolumeClaim']} does not exist and should")
            annotations = pvc["metadata"].get("annotations") or {}
            if annotations.get(plan.POPULATED_FOR_ANNOTATION) != dv_name:
                await self.client.patch(
                    PERSISTENT_VOLUME_CLAIMS,
                    pvc["metadata"]["name"],
                    {"metadata": {"annotations": {plan.POPULATED_FOR_ANNOTATION: dv_name}}},
                    namespace,
                )
            entry["dataVolumeName"] = dv_name
            changed = True
        if changed:
            return True
        vm = plan.restored_vm(restore, snapshot_vm, target)
        if await self._reconcile_data_volumes(restore, vm):
            return True
        if target is not None:
            deleted = plan.deleted_data_volumes(target, vm)
            if deleted != (status.get("deletedDataVolumes") or []):
                status["deletedDataVolumes"] = deleted
                return True
        try:
            if await self.backend_claims.hand_over(restore, snapshot_vm):
                return True
        except RestoreBackendError as exc:
            raise RestoreError(str(exc)) from exc
        snapshot_name = str((restore.get("spec") or {}).get("virtualMachineSnapshotName", ""))
        try:
            await instancetype_revisions.restore(self.client, self.revisions, vm, snapshot_name, target)
        except instancetype_revisions.RevisionMissing as exc:
            raise RestoreError(str(exc)) from exc
        if target is None:
            patches = (restore.get("spec") or {}).get("patches") or []
            vm = self._patched(vm, patches)
            created = await self.client.create(VIRTUAL_MACHINES, vm, namespace)
        else:
            created = await self.client.update(VIRTUAL_MACHINES, vm)
        await instancetype_revisions.claim(self.client, created)
        backend = restored_entry(restore, snapshot_vm)
        await self._own_restored_claims(restore, created, [str(backend["persistentVolumeClaim"])] if backend else [])
        log.info("target VM updated to the snapshot's spec", extra=object_fields(created))
        return True

    @staticmethod
    def _patched(vm: Object, patches: list[str]) -> Object:
        if not patches:
            return vm
        operations = []
        for text in patches:
            try:
                operations.append(json.loads(text))
            except ValueError as exc:
                raise RestoreError(f"cannot decode vm patches {patches}: {exc}") from exc
        try:
            result: Object = apply_patch(vm, operations)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise RestoreError(f"error patching VM {vm['metadata'].get('name')}: {exc}") from exc
        return result

    async def _reconcile_data_volumes(self, restore: Object, vm: Object) -> bool:
        namespace = restore["metadata"]["namespace"]
        waiting = False
        for template in (vm.get("spec") or {}).get("dataVolumeTemplates") or []:
            name = str(template["metadata"]["name"])
            dv = self.data_volumes.get(f"{namespace}/{name}")
            if dv is not None:
                phase = (dv.get("status") or {}).get("phase")
                waiting = waiting or phase not in ("Succeeded", "WaitForFirstConsumer", "PendingPopulation")
                continue
            pvc = self.pvcs.get(f"{namespace}/{name}")
            if pvc is None:
                raise RestoreError(f"when creating restore dv pvc {namespace}/{name} does not exist and should")
            annotations = pvc["metadata"].get("annotations") or {}
            if annotations.get(plan.POPULATED_FOR_ANNOTATION) != name or pvc["metadata"].get("ownerReferences"):
                continue
            meta: dict[str, Any] = {**copy_json(template.get("metadata") or {}), "namespace": namespace}
            data_volume = {
                "apiVersion": c.CDI_API_VERSION,
                "kind": c.DATA_VOLUME_KIND,
                "metadata": meta,
                "spec": copy_json(template.get("spec") or {}),
            }
            meta.setdefault("annotations", {}).update(
                {plan.RESTORE_NAME_ANNOTATION: restore["metadata"]["name"], plan.PRE_POPULATED_ANNOTATION: "true"}
            )
            try:
                await self.client.create(DATA_VOLUMES, data_volume, namespace)
            except AlreadyExists:
                continue
            except ApiError as exc:
                self.recorder.event(
                    restore,
                    WARNING,
                    "RestoreDataVolumeCreateError",
                    f"Error creating restore DataVolume {name}: {exc.message}",
                )
                raise RestoreError(f"Failed to create restore DataVolume: {exc.message}") from exc
            waiting = True
        return waiting

    async def _own_restored_claims(self, restore: Object, vm: Object, backend_claims: list[str]) -> None:
        """Claims restored for a VM that did not exist yet (its volumes' and its backend storage's) are owned by it
        once it does."""
        if (restore.get("spec") or {}).get("volumeOwnershipPolicy") == "None":
            return
        namespace = vm["metadata"]["namespace"]
        volumes = ((vm.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
        claims = [(v.get("persistentVolumeClaim") or {}).get("claimName") for v in volumes]
        for claim in [*claims, *backend_claims]:
            if not claim:
                continue
            try:
                pvc = await self.client.get(PERSISTENT_VOLUME_CLAIMS, claim, namespace)
            except NotFound:
                continue
            annotations = pvc["metadata"].get("annotations") or {}
            if (
                pvc["metadata"].get("ownerReferences")
                or annotations.get(plan.OWNED_BY_VM_ANNOTATION) != restore["metadata"]["name"]
            ):
                continue
            pvc["metadata"]["ownerReferences"] = [plan.vm_owner_reference(vm)]
            del annotations[plan.OWNED_BY_VM_ANNOTATION]
            await self.client.update(PERSISTENT_VOLUME_CLAIMS, pvc)

    # ------------------------------------------------------------------------------------------------ status

    def _conditions(
        self, restore: Object, *, progressing: bool, ready: bool, reason: str, ready_reason: str = ""
    ) -> None:
        conditions = restore.setdefault("status", {}).setdefault("conditions", [])
        now = _now()
        st.update_condition(conditions, st.condition(st.PROGRESSING, progressing, reason, now))
        st.update_condition(conditions, st.condition(st.READY, ready, ready_reason or reason, now))

    async def _record_error(self, restore: Object, message: str, *, fail: bool = False) -> None:
        original = copy_json(restore)
        self._conditions(restore, progressing=False, ready=False, reason=message)
        if fail:
            conditions = restore["status"]["conditions"]
            st.update_condition(conditions, st.condition(st.FAILURE, True, message, _now()))
            self.recorder.event(restore, WARNING, "Operation failed", f"VirtualMachineRestore failed {message}")
        else:
            self.recorder.event(
                restore, WARNING, "VirtualMachineRestoreError", f"VirtualMachineRestore encountered error {message}"
            )
        log.warning("restore: %s", message, extra=object_fields(restore))
        try:
            await self._write_status(original, restore)
        except (Conflict, NotFound):
            pass

    async def _write_status(self, original: Object, restore: Object) -> None:
        if restore.get("status") != original.get("status"):
            await self.client.update_status(VM_RESTORES, restore)
