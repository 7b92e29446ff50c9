"""KubeVirt's VirtualMachineSnapshot controller: a VM's spec and a VolumeSnapshot of each of its claims.

After `pkg/storage/snapshot/snapshot.go`. A snapshot locks its VM (`status.snapshotInProgress`), records the VM in a
VirtualMachineSnapshotContent with one volume backup per claim whose StorageClass has a VolumeSnapshotClass, and the
content's reconcile creates the VolumeSnapshots; the snapshot is Succeeded once they all exist and ReadyToUse once
they are all ready. Without the CSI snapshot API on the cluster no claim is snapshotted: the snapshot holds the spec.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.finalizer_patch import finalizers_patch
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.timestamps import format_time
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import VM_SNAPSHOT_CONTENTS, VM_SNAPSHOTS, VOLUME_SNAPSHOTS
from pykubevirt.controller import snapshot_instancetype_revisions as instancetype_revisions
from pykubevirt.controller import vm_snapshot_status as st
from pykubevirt.controller.backend_storage import NoBackendClaim, index_claim_owners, vm_backend_volume
from pykubevirt.controller.vm_snapshot_source import (
    SnapshotSource,
    SourceLocks,
    all_volume_claims,
    simplified_metadata,
    source_of,
)
from pykubevirt.controller.vm_snapshot_source import volume_claims as source_claims
from pykubevirt.controller.volume_snapshot_class import AmbiguousSnapshotClass, snapshot_class_name
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.snapshot")

RETRY_SECONDS = 5.0
# The snapshot informer's index of `namespace/VM name` of the source: every VM and VMI event asks it.
SOURCE_INDEX = "source-vm"
CONTENT_DELETION_SECONDS = 5.0


def _now() -> datetime:
    return datetime.now(UTC)


def _key(obj: Object) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def source_vm_key(snapshot: Object) -> list[str]:
    name = ((snapshot.get("spec") or {}).get("source") or {}).get("name")
    return [f"{snapshot['metadata'].get('namespace', '')}/{name}"] if name else []


class SnapshotClasses:
    """The VolumeSnapshotClass for a StorageClass, from the caches (None: the cluster has no CSI snapshot API)."""

    def __init__(self, storage_classes: Informer, classes: Informer | None) -> None:
        self.storage_classes = storage_classes
        self.classes = classes

    def for_storage_class(self, name: str) -> str:
        if self.classes is None:
            return ""
        return snapshot_class_name(name, self.storage_classes.get(name), self.classes.items())


class VMSnapshotController:
    """Reconciles VirtualMachineSnapshots (keys `namespace/name`) and, through `contents`, their contents."""

    def __init__(
        self,
        client: KubeClient,
        *,
        snapshots: Informer,
        contents: Informer,
        vms: Informer,
        vmis: Informer,
        pvcs: Informer,
        data_volumes: Informer,
        pods: Informer,
        revisions: Informer,
        classes: SnapshotClasses,
        volume_snapshots: Informer | None,
        recorder: EventRecorder,
    ) -> None:
        self.client = client
        self.snapshots = snapshots
        self.contents = contents
        self.vms = vms
        self.vmis = vmis
        self.pvcs = pvcs
        self.classes = classes
        self.volume_snapshots = volume_snapshots
        self.recorder = recorder
        self.locks = SourceLocks(client, pvcs=pvcs, data_volumes=data_volumes, pods=pods, revisions=revisions)
        self.content_reconciler = ContentReconciler(self)
        index_claim_owners(pvcs)
        snapshots.add_indexer(SOURCE_INDEX, source_vm_key)

    # ------------------------------------------------------------------------------------------- key mapping

    def keys_for_vm(self, vm: Object) -> list[str]:
        """The snapshots of this VM (the lock and the VM's state move them on), from the source index."""
        return [_key(s) for s in self.snapshots.by_index(SOURCE_INDEX, _key(vm))]

    def keys_for_content(self, content: Object) -> list[str]:
        name = (content.get("spec") or {}).get("virtualMachineSnapshotName")
        return [f"{content['metadata'].get('namespace', '')}/{name}"] if name else []

    def content_keys_for_snapshot(self, snapshot: Object) -> list[str]:
        return [f"{snapshot['metadata'].get('namespace', '')}/{st.content_name(snapshot)}"]

    def content_keys_for_volume_snapshot(self, volume_snapshot: Object) -> list[str]:
        namespace = volume_snapshot["metadata"].get("namespace", "")
        return [
            f"{namespace}/{ref['name']}"
            for ref in volume_snapshot["metadata"].get("ownerReferences") or []
            if ref.get("kind") == c.VM_SNAPSHOT_CONTENT_KIND
        ]

    # -------------------------------------------------------------------------------------------- snapshots

    async def reconcile(self, key: str) -> Result | None:
        snapshot = self.snapshots.get(key)
        if snapshot is None:
            return None
        try:
            wait = await self._update_snapshot(copy_json(snapshot))
        except Conflict:
            return Result(requeue_after=0.2)
        except NotFound:
            return None
        return Result(requeue_after=wait) if wait > 0 else None

    def _source(self, snapshot: Object) -> SnapshotSource | None:
        source = (snapshot.get("spec") or {}).get("source") or {}
        if source.get("kind") != c.VM_KIND:
            return None
        vm = self.vms.get(f"{snapshot['metadata'].get('namespace', '')}/{source.get('name', '')}")
        return None if vm is None else source_of(copy_json(vm), snapshot, self.vmis)

    async def _update_snapshot(self, snapshot: Object) -> float:
        now = _now()
        source = self._source(snapshot)
        content = self.contents.get(f"{snapshot['metadata'].get('namespace', '')}/{st.content_name(snapshot)}")
        going = st.terminating(snapshot, now)
        if not going:
            snapshot = await self._set_finalizers(VM_SNAPSHOTS, snapshot, add=st.SNAPSHOT_FINALIZER)
        retry = 0.0
        can_remove_finalizer = True
        if snapshot.get("status") is not None and source is not None:
            if st.progressing(snapshot) and not going:
                if not source.locked:
                    await self.locks.lock(source)
                    retry = RETRY_SECONDS
                elif content is None:
                    await self._create_content(snapshot, source)
                can_remove_finalizer = False
            else:
                if st.can_unlock_source(snapshot, content, now):
                    await self.locks.unlock(source)
                can_remove_finalizer = not source.locked
        if going and content is not None and st.should_delete_content(snapshot, content):
            log.info("deleting the snapshot's content", extra=object_fields(content))
            try:
                await self.client.delete(
                    VM_SNAPSHOT_CONTENTS, content["metadata"]["name"], content["metadata"]["namespace"]
                )
            except NotFound:
                pass
        snapshot = await self._update_status(snapshot, source, now)
        if st.deleting(snapshot) and can_remove_finalizer:
            await self._set_finalizers(VM_SNAPSHOTS, snapshot, remove=st.SNAPSHOT_FINALIZER)
        if retry == 0:
            return max(st.seconds_until_deadline(snapshot, _now()), 0.0) if st.progressing(snapshot) else 0.0
        return retry

    async def _set_finalizers(
        self, resource: Any, obj: Object, *, add: str | None = None, remove: str | None = None
    ) -> Object:
        before = list(obj["metadata"].get("finalizers") or [])
        if add is not None and add not in before:
            after = [*before, add]
        elif remove is not None and remove in before:
            after = [f for f in before if f != remove]
        else:
            return obj
        meta = obj["metadata"]
        result: Object = await self.client.patch(
            resource, meta["name"], finalizers_patch(before, after), meta.get("namespace"), patch_type=JSON_PATCH
        )
        return result

    async def _create_content(self, snapshot: Object, source: SnapshotSource) -> None:
        namespace = snapshot["metadata"]["namespace"]
        backups = []
        for volume, claim in sorted(all_volume_claims(source.vm, self.pvcs).items()):
            pvc = self._snapshot_claim(namespace, claim)
            if pvc is None:
                continue
            backups.append(
                {
                    "volumeName": volume,
                    "persistentVolumeClaim": {
                        "metadata": simplified_metadata(pvc["metadata"]),
                        "spec": copy_json(pvc.get("spec") or {}),
                    },
                    "volumeSnapshotName": st.volume_snapshot_name(snapshot, volume),
                }
            )
        recorded = self.locks.source_vm(source)
        await instancetype_revisions.capture(self.client, self.locks.revisions, recorded, snapshot)
        content: Object = {
            "apiVersion": c.SNAPSHOT_API_VERSION,
            "kind": c.VM_SNAPSHOT_CONTENT_KIND,
            "metadata": {
                "name": st.content_name(snapshot),
                "namespace": namespace,
                "finalizers": [st.CONTENT_FINALIZER],
            },
            "spec": {
                "virtualMachineSnapshotName": snapshot["metadata"]["name"],
                "source": {"virtualMachine": recorded},
                "volumeBackups": backups,
            },
        }
        try:
            await self.client.create(VM_SNAPSHOT_CONTENTS, content, namespace)
        except AlreadyExists:
            pass
        self.recorder.event(
            snapshot,
            NORMAL,
            "SuccessfulVirtualMachineSnapshotContentCreate",
            f"Successfully created VirtualMachineSnapshotContent {content['metadata']['name']}",
        )
        log.info("created the snapshot's content", extra=object_fields(snapshot, volumes=len(backups)))

    def _snapshot_claim(self, namespace: str, name: str) -> Object | None:
        """The claim to back up: bound, with a StorageClass that has a VolumeSnapshotClass (getSnapshotPVC)."""
        pvc = self.pvcs.get(f"{namespace}/{name}")
        if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
            return None
        storage_class = (pvc.get("spec") or {}).get("storageClassName")
        if not storage_class:
            return None
        if not self.classes.for_storage_class(str(storage_class)):
            log.warning("no VolumeSnapshotClass for %s", storage_class, extra=object_fields(pvc))
            return None
        return pvc

    async def _update_status(self, snapshot: Object, source: SnapshotSource | None, now: datetime) -> Object:
        stamp = format_time(now)
        before = copy_json(snapshot.get("status"))
        status = snapshot.setdefault("status", {"readyToUse": False})
        conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
        content = self.contents.get(f"{snapshot['metadata'].get('namespace', '')}/{st.content_name(snapshot)}")
        if source is not None:
            status["sourceUID"] = source.uid
        content_status = (content or {}).get("status")
        if content is not None and content_status is not None:
            status["virtualMachineSnapshotContentName"] = content["metadata"]["name"]
            for field in ("creationTime", "readyToUse", "error"):
                if content_status.get(field) is not None:
                    status[field] = copy_json(content_status[field])
                else:
                    status.pop(field, None)
        if st.deadline_exceeded(snapshot, now):
            status["phase"] = st.FAILED
            st.update_condition(conditions, st.condition(st.FAILURE, True, st.DEADLINE_EXCEEDED, stamp))
            st.update_condition(conditions, st.condition(st.PROGRESSING, False, "Operation failed", stamp))
        elif st.succeeded(snapshot) or status.get("creationTime") is not None:
            status["phase"] = st.SUCCEEDED
            st.update_condition(conditions, st.condition(st.PROGRESSING, False, "Operation complete", stamp))
            self._snapshot_volumes(status, content)
        else:
            status["phase"] = st.IN_PROGRESS
            if source is not None:
                st.update_condition(conditions, st.condition(st.PROGRESSING, source.locked, source.lock_message, stamp))
                indications, messages = st.source_indications(
                    status.get("indications") or [],
                    online=source.online,
                    paused=source.paused,
                    guest_agent=source.guest_agent,
                    error=str((status.get("error") or {}).get("message") or ""),
                )
                _set_or_drop(status, "indications", indications)
                _set_or_drop(status, "sourceIndications", messages)
            else:
                st.update_condition(conditions, st.condition(st.PROGRESSING, False, "Source does not exist", stamp))
            if st.deleting(snapshot):
                status["phase"] = st.DELETING
                st.update_condition(conditions, st.condition(st.PROGRESSING, False, "VM snapshot is deleting", stamp))
        if st.ready(snapshot):
            st.update_condition(conditions, st.condition(st.READY, True, "Ready", stamp))
        else:
            st.update_condition(conditions, st.condition(st.READY, False, "Not ready", stamp))
        if status.get("error") is not None:
            st.update_condition(conditions, st.condition(st.PROGRESSING, False, "In error state", stamp))
        if status == before:
            return snapshot
        result: Object = await self.client.update_status(VM_SNAPSHOTS, snapshot)
        if before is None or before.get("phase") != status.get("phase"):
            log.info("snapshot %s", status["phase"], extra=object_fields(snapshot))
        return result

    def _snapshot_volumes(self, status: dict[str, Any], content: Object | None) -> None:
        """Which of the recorded VM's volumes the snapshot holds, and Partial when a snapshottable one is left out."""
        vm = ((content or {}).get("spec") or {}).get("source", {}).get("virtualMachine")
        if not vm:
            return
        names = [
            v.get("name") for v in ((vm.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
        ]
        snapshottable = set(source_claims(vm))
        with contextlib.suppress(NoBackendClaim):
            if (backend := vm_backend_volume(self.pvcs, vm)) is not None:
                names.append(backend["name"])
                snapshottable.add(backend["name"])
        backed_up = {b.get("volumeName") for b in (content or {}).get("spec", {}).get("volumeBackups") or []}
        included = [n for n in names if n in backed_up]
        excluded = [n for n in names if n not in backed_up]
        status["snapshotVolumes"] = {
            k: v for k, v in (("includedVolumes", included), ("excludedVolumes", excluded)) if v
        }
        if any(name in snapshottable for name in excluded):
            st.add_partial_indication(status)

    # --------------------------------------------------------------------------------------------- contents

    async def reconcile_content(self, key: str) -> Result | None:
        content = self.contents.get(key)
        if content is None:
            return None
        try:
            wait = await self._update_content(copy_json(content))
        except Conflict:
            return Result(requeue_after=0.2)
        except NotFound:
            return None
        return Result(requeue_after=wait) if wait > 0 else None

    async def _update_content(self, content: Object) -> float:
        namespace = content["metadata"]["namespace"]
        snapshot_name = (content.get("spec") or {}).get("virtualMachineSnapshotName")
        snapshot = self.snapshots.get(f"{namespace}/{snapshot_name}") if snapshot_name else None
        if snapshot is None or st.terminating(snapshot, _now()):
            await self._unfreeze(snapshot)
            content = await self._set_finalizers(VM_SNAPSHOT_CONTENTS, content, remove=st.CONTENT_FINALIZER)
            if snapshot is not None and st.should_delete_content(snapshot, content):
                return 0.0
        if st.deleting(content):
            return CONTENT_DELETION_SECONDS
        created_before = (content.get("status") or {}).get("creationTime") is not None
        found: dict[str, Object | None] = {}
        missing: list[str] = []
        skipped: list[str] = []
        frozen = False
        backups = (content.get("spec") or {}).get("volumeBackups") or []
        for backup in backups:
            name = backup.get("volumeSnapshotName")
            if not name:
                continue
            volume_snapshot = self._volume_snapshot(namespace, str(name))
            if volume_snapshot is None:
                if created_before:
                    self.recorder.event(
                        content, WARNING, "VolumeSnapshotMissing", f"VolumeSnapshot {name} no longer exists"
                    )
                    missing.append(str(name))
                    continue
                if snapshot is None or st.deleting(snapshot):
                    skipped.append(str(name))
                    continue
                if not frozen:
                    source = self._source(snapshot)
                    if source is None:
                        raise SnapshotError("unable to get snapshot source")
                    try:
                        await self.locks.freeze(source, st.failure_deadline(snapshot))
                    except ApiError as exc:
                        # Retried: the agent may be busy; the error shows on the content and the snapshot.
                        status = copy_json(content.get("status") or {})
                        status["error"] = {"time": format_time(_now()), "message": exc.message}
                        status["readyToUse"] = False
                        if status != (content.get("status") or {}):
                            content["status"] = status
                            await self.client.update_status(VM_SNAPSHOT_CONTENTS, content)
                        return RETRY_SECONDS
                    frozen = True
                volume_snapshot = await self._create_volume_snapshot(content, backup)
            found[str(name)] = volume_snapshot
        return await self._content_status(content, snapshot, found, missing, skipped)

    async def _content_status(
        self,
        content: Object,
        snapshot: Object | None,
        found: dict[str, Object | None],
        missing: list[str],
        skipped: list[str],
    ) -> float:
        """Record what the VolumeSnapshots say; thaw the guest once they are all created."""
        statuses = st.content_volume_statuses((content.get("spec") or {}).get("volumeBackups") or [], found)
        created, is_ready, message = st.content_outcome(statuses, missing, skipped)
        status = copy_json(content.get("status") or {})
        if created and status.get("creationTime") is None:
            failure = await self._unfreeze(snapshot)
            if st.VSS_FREEZE_LIMIT in failure:
                # The guest could not hold its freeze until the volumes were taken: not created yet, said, and tried
                # again (the volume snapshots stand; the snapshot is crash-consistent, and says so: QuiesceTimeout).
                status["error"] = {"time": format_time(_now()), "message": failure}
                if status != (content.get("status") or {}):
                    content["status"] = status
                    await self.client.update_status(VM_SNAPSHOT_CONTENTS, content)
                return RETRY_SECONDS
            status["creationTime"] = format_time(_now())
        if message and not is_ready:
            if (status.get("error") or {}).get("message") != message:
                status["error"] = {"time": format_time(_now()), "message": message}
        elif not message:
            status.pop("error", None)
        status["readyToUse"] = is_ready
        _set_or_drop(status, "volumeSnapshotStatus", statuses)
        if status != (content.get("status") or {}):
            content["status"] = status
            await self.client.update_status(VM_SNAPSHOT_CONTENTS, content)
        return 0.0

    async def _unfreeze(self, snapshot: Object | None) -> str:
        """Thaw the source's guest; what went wrong, "" when nothing did."""
        source = None if snapshot is None else self._source(snapshot)
        if source is None:
            return ""
        try:
            await self.locks.unfreeze(source)
        except ApiError as exc:
            log.warning("unfreezing the snapshot's source failed: %s", exc.message, extra=object_fields(snapshot))
            return exc.message
        return ""

    def _volume_snapshot(self, namespace: str, name: str) -> Object | None:
        return None if self.volume_snapshots is None else self.volume_snapshots.get(f"{namespace}/{name}")

    async def _create_volume_snapshot(self, content: Object, backup: dict[str, Any]) -> Object | None:
        claim = backup.get("persistentVolumeClaim") or {}
        storage_class = (claim.get("spec") or {}).get("storageClassName")
        namespace = content["metadata"]["namespace"]
        if not storage_class:
            raise SnapshotError(
                f"{namespace}/{claim.get('metadata', {}).get('name')} VolumeSnapshot requested but no storage class"
            )
        class_name = self.classes.for_storage_class(str(storage_class))
        if not class_name:
            log.warning("no VolumeSnapshotClass for %s", storage_class, extra=object_fields(content))
            return None
        vm = ((content.get("spec") or {}).get("source") or {}).get("virtualMachine") or {}
        name = str(backup["volumeSnapshotName"])
        volume_snapshot = {
            "apiVersion": f"{c.VOLUME_SNAPSHOT_GROUP}/{c.VOLUME_SNAPSHOT_VERSION}",
            "kind": c.VOLUME_SNAPSHOT_KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    st.SOURCE_NAME_LABEL: vm.get("metadata", {}).get("name", ""),
                    st.SOURCE_NAMESPACE_LABEL: vm.get("metadata", {}).get("namespace", ""),
                },
                "ownerReferences": [
                    {
                        "apiVersion": c.SNAPSHOT_API_VERSION,
                        "kind": c.VM_SNAPSHOT_CONTENT_KIND,
                        "name": content["metadata"]["name"],
                        "uid": content["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "source": {"persistentVolumeClaimName": claim.get("metadata", {}).get("name")},
                "volumeSnapshotClassName": class_name,
            },
        }
        try:
            created: Object = await self.client.create(VOLUME_SNAPSHOTS, volume_snapshot, namespace)
        except AlreadyExists:
            return self._volume_snapshot(namespace, name)
        self.recorder.event(
            content, NORMAL, "SuccessfulVolumeSnapshotCreate", f"Successfully created VolumeSnapshot {name}"
        )
        log.info("created VolumeSnapshot %s", name, extra=object_fields(content))
        return created


class SnapshotError(Exception):
    """A snapshot cannot go on as asked; the message is KubeVirt's."""


class ContentReconciler:
    """The content queue's reconciler: the snapshot controller's content half."""

    def __init__(self, owner: VMSnapshotController) -> None:
        self.owner = owner

    async def reconcile(self, key: str) -> Result | None:
        return await self.owner.reconcile_content(key)


def _set_or_drop(status: dict[str, Any], field: str, value: list[Any]) -> None:
    if value:
        status[field] = value
    else:
        status.pop(field, None)


__all__ = ["AmbiguousSnapshotClass", "SnapshotClasses", "VMSnapshotController"]
