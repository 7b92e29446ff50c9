"""KubeVirt's VirtualMachineClone controller: a new VM from a VM or a snapshot, through a snapshot and a restore.

After `pkg/virt-controller/watch/clone/clone.go`. A VM source is snapshotted (`tmp-snapshot-<uid>`); the snapshot is
restored (`tmp-restore-<uid>`) into the target VM with patches that give it its own MACs, serial and firmware UUID
and keep only the labels and annotations the filters let through; once the target exists and its claims are bound,
the temporary restore (and a snapshot the clone made) are deleted. Phases: SnapshotInProgress, RestoreInProgress,
CreatingTargetVM, Succeeded, or Failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import backend_storage
from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.timestamps import format_time
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import VM_CLONES, VM_RESTORES, VM_SNAPSHOTS
from pykubevirt.controller import vm_clone_plan as plan
from pykubevirt.controller import vm_snapshot_status as st
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.clone")

RETRY_SECONDS = 5.0
# The clone informer's index of the VMs a clone names (source, target): every VM event asks it.
VM_INDEX = "vms"


def vm_keys(clone: Object) -> list[str]:
    spec, status = clone.get("spec") or {}, clone.get("status") or {}
    names = {(spec.get("source") or {}).get("name"), (spec.get("target") or {}).get("name"), status.get("targetName")}
    namespace = clone["metadata"].get("namespace", "")
    return [f"{namespace}/{name}" for name in sorted(n for n in names if n)]


class CloneError(Exception):
    """A step failed in a way worth retrying; the clone's status is written first."""


@dataclass(slots=True)
class Sync:
    """What one pass found (KubeVirt's syncInfoType)."""

    snapshot_name: str = ""
    snapshot_ready: bool = False
    restore_name: str = ""
    restore_ready: bool = False
    target_name: str = ""
    target_created: bool = False
    claims_bound: bool = False
    pending: str = ""
    failing: str = ""
    event: str = ""
    error: str = ""
    events: list[tuple[str, str]] = field(default_factory=list)


class VMCloneController:
    """Reconciles VirtualMachineClones (keys `namespace/name`)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        clones: Informer,
        vms: Informer,
        snapshots: Informer,
        contents: Informer,
        restores: Informer,
        pvcs: Informer,
        recorder: EventRecorder,
    ) -> None:
        self.client = client
        self.clones = clones
        self.vms = vms
        self.snapshots = snapshots
        self.contents = contents
        self.restores = restores
        self.pvcs = pvcs
        self.recorder = recorder
        clones.add_indexer(VM_INDEX, vm_keys)

    def keys_for_owned(self, obj: Object) -> list[str]:
        """The clone owning this snapshot or restore."""
        namespace = obj["metadata"].get("namespace", "")
        return [
            f"{namespace}/{r['name']}"
            for r in obj["metadata"].get("ownerReferences") or []
            if r.get("kind") == c.VM_CLONE_KIND and r.get("apiVersion") == c.CLONE_API_VERSION
        ]

    def keys_for_vm(self, vm: Object) -> list[str]:
        """Clones of this VM (its volume statuses may now allow the snapshot) or to it (it exists now)."""
        meta = vm["metadata"]
        clones = self.clones.by_index(VM_INDEX, f"{meta.get('namespace', '')}/{meta['name']}")
        return [f"{found['metadata'].get('namespace', '')}/{found['metadata']['name']}" for found in clones]

    async def reconcile(self, key: str) -> Result | None:
        clone = self.clones.get(key)
        if clone is None:
            return None
        clone = copy_json(clone)
        status = clone.get("status") or {}
        namespace = clone["metadata"]["namespace"]
        if status.get("phase") == plan.SUCCEEDED and self.vms.get(f"{namespace}/{status.get('targetName')}") is None:
            # The clone is done and its VM deleted: the clone goes with it.
            if not clone["metadata"].get("deletionTimestamp"):
                log.info("deleting the clone of a deleted VM", extra=object_fields(clone))
                try:
                    await self.client.delete(VM_CLONES, clone["metadata"]["name"], namespace)
                except NotFound:
                    pass
            return None
        sync = await self._sync(clone)
        try:
            await self._update_status(clone, sync)
        except Conflict:
            return Result(requeue_after=0.2)
        if sync.error:
            log.warning("clone: %s", sync.error, extra=object_fields(clone))
            return Result(requeue_after=RETRY_SECONDS)
        return None

    # ------------------------------------------------------------------------------------------------ flow

    async def _sync(self, clone: Object) -> Sync:
        namespace = clone["metadata"]["namespace"]
        spec, status = clone.get("spec") or {}, clone.get("status") or {}
        source = spec.get("source") or {}
        kind, name = source.get("kind"), str(source.get("name", ""))
        sync = Sync()
        source_vm: Object | None = None
        snapshot_name = ""
        if kind == plan.SOURCE_VM:
            source_vm = self.vms.get(f"{namespace}/{name}")
            if source_vm is None:
                sync.pending, sync.event = (
                    f"Source doesnt exist: VirtualMachine {namespace}/{name}",
                    "SourceDoesNotExist",
                )
                return sync
            template = ((source_vm.get("spec") or {}).get("template")) or {}
            if backend_storage.is_needed(template):
                sync.failing = f"Clone of source with backendstorage is not supported: VM {namespace}/{name}"
                sync.event = "SourceVMWithBackendStorageInvalid"
                return sync
        elif kind == plan.SOURCE_SNAPSHOT:
            if self.snapshots.get(f"{namespace}/{name}") is None:
                sync.pending = f"Source doesnt exist: VirtualMachineSnapshot {namespace}/{name}"
                sync.event = "SourceDoesNotExist"
                return sync
            snapshot_name = name
        else:
            sync.error = f"clone {clone['metadata']['name']} is defined with an unknown source type {kind}"
            return sync
        snapshot_name = snapshot_name or str(status.get("snapshotName") or "")
        phase = status.get("phase") or plan.PHASE_UNSET
        if phase in (plan.PHASE_UNSET, plan.SNAPSHOT_IN_PROGRESS):
            if source_vm is not None and not status.get("snapshotName"):
                return await self._create_snapshot(clone, source_vm, sync)
            if not self._snapshot_ready(clone, snapshot_name, sync):
                return sync
            phase = plan.RESTORE_IN_PROGRESS
        if phase == plan.RESTORE_IN_PROGRESS:
            snapshot = self.snapshots.get(f"{namespace}/{snapshot_name}")
            if snapshot is None:
                sync.failing, sync.event = f"snapshot {snapshot_name} does not exist anymore", "SnapshotDeleted"
                return sync
            if not status.get("restoreName"):
                return await self._create_restore(clone, snapshot, snapshot_name, sync)
            if not self._restore_ready(clone, sync):
                return sync
            phase = plan.CREATING_TARGET_VM
        if phase == plan.CREATING_TARGET_VM:
            target = sync.target_name or str(status.get("targetName") or (spec.get("target") or {}).get("name") or "")
            if self.vms.get(f"{namespace}/{target}") is None:
                sync.error = f"target VM {target} is not created yet for clone {clone['metadata']['name']}"
                return sync
            sync.events.append(("TargetVMCreated", f"created target VM {target} for clone {clone['metadata']['name']}"))
            sync.target_created = True
            phase = plan.SUCCEEDED
        if phase == plan.SUCCEEDED and status.get("restoreName"):
            await self._clean_up(clone, kind == plan.SOURCE_VM, sync)
        return sync

    async def _create_snapshot(self, clone: Object, vm: Object, sync: Sync) -> Sync:
        problems = plan.volume_snapshot_problems(vm)
        if problems:
            sync.pending, sync.event = "\n".join(problems), "VMVolumeSnapshotsInvalid"
            return sync
        snapshot = plan.snapshot_of(clone, vm)
        name = snapshot["metadata"]["name"]
        try:
            await self.client.create(VM_SNAPSHOTS, snapshot, snapshot["metadata"]["namespace"])
        except AlreadyExists:
            sync.snapshot_name = name
            return sync
        except ApiError as exc:
            sync.error = f"failed creating snapshot {name} for clone {clone['metadata']['name']}: {exc.message}"
            return sync
        sync.events.append(("SnapshotCreated", f"created snapshot {name} for clone {clone['metadata']['name']}"))
        sync.snapshot_name = name
        return sync

    def _snapshot_ready(self, clone: Object, name: str, sync: Sync) -> bool:
        namespace, clone_name = clone["metadata"]["namespace"], clone["metadata"]["name"]
        snapshot = self.snapshots.get(f"{namespace}/{name}")
        if snapshot is None:
            sync.error = f"snapshot {name} is not created yet for clone {clone_name}"
            return False
        if not st.ready(snapshot):
            return False
        content = self.contents.get(f"{namespace}/{st.content_name(snapshot)}")
        if content is None:
            sync.failing = f"snapshot content {st.content_name(snapshot)} in namespace {namespace} does not exist"
            sync.event = "SnapshotContentInvalid"
            return False
        problems = plan.volumes_not_backed_up(content)
        if problems:
            sync.failing, sync.event = "\n".join(problems), "SnapshotContentInvalid"
            return False
        sync.events.append(("SnapshotReady", f"snapshot {name} for clone {clone_name} is ready to use"))
        sync.snapshot_ready = True
        return True

    async def _create_restore(self, clone: Object, snapshot: Object, snapshot_name: str, sync: Sync) -> Sync:
        namespace, clone_name = clone["metadata"]["namespace"], clone["metadata"]["name"]
        content = self.contents.get(f"{namespace}/{st.content_name(snapshot)}")
        if content is None:
            missing = f"snapshot content {st.content_name(snapshot)} in namespace {namespace} does not exist"
            sync.error = f"cannot get VM manifest from snapshot: {missing}"
            return sync
        vm = ((content.get("spec") or {}).get("source") or {}).get("virtualMachine") or {}
        patches = plan.clone_patches(vm, clone.get("spec") or {})
        restore = plan.restore_of(clone, str(vm.get("metadata", {}).get("name", "")), snapshot_name, patches)
        name = restore["metadata"]["name"]
        try:
            await self.client.create(VM_RESTORES, restore, namespace)
        except AlreadyExists:
            sync.restore_name = name
            return sync
        except ApiError as exc:
            message = f"failed creating restore {name} for clone {clone_name}: {exc.message}"
            self.recorder.event(clone, WARNING, "RestoreCreationFailed", message)
            sync.error = message
            return sync
        sync.events.append(("RestoreCreated", f"created restore {name} for clone {clone_name}"))
        sync.restore_name = name
        return sync

    def _restore_ready(self, clone: Object, sync: Sync) -> bool:
        namespace, clone_name = clone["metadata"]["namespace"], clone["metadata"]["name"]
        name = str((clone.get("status") or {}).get("restoreName"))
        restore = self.restores.get(f"{namespace}/{name}")
        if restore is None:
            sync.error = f"restore {name} is not created yet for clone {clone_name}"
            return False
        restore_status = restore.get("status") or {}
        failed = any(cond.get("type") == st.FAILURE for cond in restore_status.get("conditions") or [])
        if restore_status.get("complete") is not True and not failed:
            return False
        sync.events.append(("RestoreReady", f"restore {name} for clone {clone_name} is ready to use"))
        sync.restore_ready = True
        sync.target_name = str(((restore.get("spec") or {}).get("target") or {}).get("name", ""))
        return True

    async def _clean_up(self, clone: Object, own_snapshot: bool, sync: Sync) -> None:
        """Once the target's claims are bound, the restore (and the clone's own snapshot) are deleted."""
        namespace, clone_name = clone["metadata"]["namespace"], clone["metadata"]["name"]
        status = clone.get("status") or {}
        restore = self.restores.get(f"{namespace}/{status.get('restoreName')}")
        if restore is None:
            sync.error = f"restore {status.get('restoreName')} is not created yet for clone {clone_name}"
            return
        for entry in (restore.get("status") or {}).get("restores") or []:
            pvc = self.pvcs.get(f"{namespace}/{entry.get('persistentVolumeClaim')}")
            if pvc is None:
                sync.error = f"PVC {entry.get('persistentVolumeClaim')} is not created yet for clone {clone_name}"
                return
            if (pvc.get("status") or {}).get("phase") != "Bound":
                return  # a WaitForFirstConsumer claim binds when the clone first starts
        sync.events.append(("PVCBound", f"all PVC for clone {clone_name} are bound"))
        sync.claims_bound = True
        doomed = [(VM_RESTORES, str(status.get("restoreName")))]
        if own_snapshot and status.get("snapshotName"):
            doomed.append((VM_SNAPSHOTS, str(status["snapshotName"])))
        for resource, name in doomed:
            try:
                await self.client.delete(resource, name, namespace)
            except NotFound:
                pass
            except ApiError:
                kind = "restore" if resource is VM_RESTORES else "snapshot"
                sync.error = f"cannot clean up {kind} {name} for clone {clone_name}"
                return

    # ------------------------------------------------------------------------------------------------ status

    async def _update_status(self, clone: Object, sync: Sync) -> None:
        before = copy_json(clone.get("status") or {})
        status = clone.setdefault("status", {})
        conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
        now = format_time(datetime.now(UTC))
        phase_before = status.get("phase") or plan.PHASE_UNSET
        for reason, message in sync.events:
            self._record(clone, reason, message)
        if sync.pending:
            self._record(clone, sync.event, sync.pending)
            st.update_condition(conditions, st.condition(st.PROGRESSING, False, "Pending", now))
            st.update_condition(conditions, st.condition(st.READY, False, sync.pending, now))
        elif sync.failing:
            self._record(clone, sync.event, sync.failing)
            status["phase"] = plan.FAILED
            st.update_condition(conditions, st.condition(st.PROGRESSING, False, "Failed", now))
            st.update_condition(conditions, st.condition(st.READY, False, sync.failing, now))
        else:
            st.update_condition(conditions, st.condition(st.PROGRESSING, True, "Still processing", now))
            st.update_condition(conditions, st.condition(st.READY, False, "Still processing", now))
        if status.get("phase", plan.PHASE_UNSET) == plan.PHASE_UNSET and not sync.pending:
            status["phase"] = plan.SNAPSHOT_IN_PROGRESS
        if status.get("phase") == plan.SNAPSHOT_IN_PROGRESS:
            if sync.snapshot_name:
                status["snapshotName"] = sync.snapshot_name
            if sync.snapshot_ready:
                status["phase"] = plan.RESTORE_IN_PROGRESS
        if status.get("phase") == plan.RESTORE_IN_PROGRESS:
            if sync.restore_name:
                status["restoreName"] = sync.restore_name
            if sync.restore_ready:
                status["phase"] = plan.CREATING_TARGET_VM
        if status.get("phase") == plan.CREATING_TARGET_VM:
            if sync.target_name:
                status["targetName"] = sync.target_name
            if sync.target_created:
                status["phase"] = plan.SUCCEEDED
        if status.get("phase") == plan.SUCCEEDED:
            st.update_condition(conditions, st.condition(st.PROGRESSING, False, "Ready", now))
            st.update_condition(conditions, st.condition(st.READY, True, "Ready", now))
        if sync.claims_bound:
            status.pop("snapshotName", None)
            status.pop("restoreName", None)
        if status != before:
            await self.client.update_status(VM_CLONES, clone)
            if status.get("phase") != phase_before:
                log.info("clone phase %s", status.get("phase"), extra=object_fields(clone))

    def _record(self, clone: Object, reason: str, message: str) -> None:
        self.recorder.event(clone, NORMAL, reason, message)
        log.info("%s", message, extra=object_fields(clone))
