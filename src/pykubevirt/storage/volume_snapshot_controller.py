"""external-snapshotter's snapshot-controller and, for `pykubevirt.io/local-path`, its CSI snapshotter sidecar.

Upstream: `pkg/common-controller/snapshot_controller.go` (syncSnapshot, createSnapshotContent, SetDefaultSnapshotClass,
the finalizers), `pkg/sidecar-controller/snapshot_controller.go` (syncContent, createSnapshot, deletion) and
external-provisioner's getSnapshotSource for restores. Keys are `snapshot:<namespace>/<name>` and `content:<name>`.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pykubevirt.api import objects
from pykubevirt.api import volume_binding as vb
from pykubevirt.api import volume_snapshot as vs
from pykubevirt.api.timestamps import format_time
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS, VOLUME_SNAPSHOT_CONTENTS, VOLUME_SNAPSHOTS
from pykubevirt.storage.local_provisioner import PROVISIONER_NAME, LocalPathProvisioner, ProvisioningError

log = logging.getLogger("pykubevirt.storage.volume_snapshot_controller")

SNAPSHOT = "snapshot:"
CONTENT = "content:"
RETRY_SECONDS = 5.0
CONTROLLER_UPDATE_FAILED = "snapshot controller failed to update"


class SnapshotError(Exception):
    """A reason the snapshot cannot be taken yet, in the snapshot-controller's words."""


def _name(obj: Object) -> str:
    return str(objects.metadata(obj).get("name", ""))


def _finalizers(obj: Object) -> list[str]:
    return list(objects.metadata(obj).get("finalizers") or [])


def _rfc3339(nanoseconds: int) -> str:
    return format_time(datetime.fromtimestamp(nanoseconds / 1e9, UTC))


def _annotations(obj: Object) -> dict[str, Any]:
    return dict(objects.metadata(obj).get("annotations") or {})


# The snapshot informer's index of `namespace/claim` of the source: every claim event asks it.
SOURCE_CLAIM_INDEX = "source-claim"


def _source_claim_key(snapshot: Object) -> list[str]:
    claim = _source(snapshot).get("persistentVolumeClaimName")
    return [f"{objects.namespace_of(snapshot)}/{claim}"] if claim else []


class VolumeSnapshotController:
    """Snapshots of our volumes: contents made and bound, data copied and deleted, finalizers kept and released."""

    def __init__(
        self,
        client: KubeClient,
        *,
        snapshots: Informer,
        contents: Informer,
        classes: Informer,
        claims: Informer,
        volumes: Informer,
        recorder: EventRecorder,
        sidecar_recorder: EventRecorder,
        provisioner: LocalPathProvisioner,
    ) -> None:
        self.client = client
        self.snapshots = snapshots
        self.contents = contents
        self.classes = classes
        self.claims = claims
        self.volumes = volumes
        self.recorder = recorder
        self.sidecar_recorder = sidecar_recorder
        self.provisioner = provisioner
        snapshots.add_indexer(SOURCE_CLAIM_INDEX, _source_claim_key)

    async def reconcile(self, key: str) -> Result | None:
        if key.startswith(SNAPSHOT):
            return await self._sync_snapshot(key.removeprefix(SNAPSHOT))
        return await self._sync_content(key.removeprefix(CONTENT))

    # ------------------------------------------------------------------------------------------------ key mappers

    def snapshots_of_claim(self, pvc: Object) -> list[str]:
        """Snapshots taken from this claim, and the one it is restored from."""
        namespace = objects.namespace_of(pvc)
        keys = [SNAPSHOT + object_key(s) for s in self.snapshots.by_index(SOURCE_CLAIM_INDEX, object_key(pvc))]
        restored_from = vs.snapshot_data_source(pvc)
        if restored_from:
            keys.append(f"{SNAPSHOT}{namespace}/{restored_from}")
        return keys

    def unready_snapshots(self, _: Object) -> list[str]:
        return [SNAPSHOT + object_key(s) for s in self.snapshots.items() if not _ready(s)]

    # ------------------------------------------------------------------------------------------------ snapshots

    async def _sync_snapshot(self, key: str) -> Result | None:
        snapshot = self.snapshots.get(key)
        if snapshot is None:
            return None
        await self._release_claim(snapshot, skip_current=False)
        if objects.is_marked_for_deletion(snapshot):
            return await self._delete_snapshot(snapshot)
        source = _source(snapshot)
        if ("persistentVolumeClaimName" in source) == ("volumeSnapshotContentName" in source):
            message = "Exactly one of PersistentVolumeClaimName and VolumeSnapshotContentName should be specified"
            await self._snapshot_error(snapshot, "SnapshotValidationError", message)
            return None
        if "persistentVolumeClaimName" in source and not objects.spec(snapshot).get("volumeSnapshotClassName"):
            return await self._set_default_class(snapshot)
        class_name = objects.spec(snapshot).get("volumeSnapshotClassName")
        if class_name and self.classes.get(str(class_name)) is None:
            message = f"Failed to get snapshot class with error {_class_not_found(str(class_name))}"
            await self._snapshot_error(snapshot, "GetSnapshotClassFailed", message, ready_false=False)
            return Result(requeue_after=RETRY_SECONDS)
        content = self._content_of(snapshot)
        snapshot = await self._add_snapshot_finalizers(snapshot, content)
        if "volumeSnapshotContentName" in source:
            return await self._bind_pre_provisioned(snapshot, content)
        if content is None:
            return await self._create_content(snapshot)
        if (objects.spec(content).get("source") or {}).get("snapshotHandle"):
            message = f"Snapshot handle should not be set in content {key} for dynamic provisioning"
            await self._snapshot_error(snapshot, "SnapshotHandleSet", message)
            return None
        await self._update_snapshot_status(snapshot, content)
        return None

    def _content_of(self, snapshot: Object) -> Object | None:
        """The content bound (or to be bound) to the snapshot, when it exists and points back at it."""
        name = _source(snapshot).get("volumeSnapshotContentName") or vs.content_name_for(snapshot)
        content = self.contents.get(str(name))
        if content is None:
            return None
        ref = objects.spec(content).get("volumeSnapshotRef") or {}
        if ref.get("name") != _name(snapshot) or ref.get("namespace") != objects.namespace_of(snapshot):
            return None
        if ref.get("uid") and ref.get("uid") != objects.uid_of(snapshot):
            return None
        return content

    async def _set_default_class(self, snapshot: Object) -> Result | None:
        """SetDefaultSnapshotClass: the one default class of the source volume's driver goes into the spec."""
        try:
            pv = self._volume_of(snapshot)
            driver = _driver_of(pv, snapshot)
            defaults = [c for c in self.classes.items() if vs.is_default_class(c) and c.get("driver") == driver]
            if not defaults:
                raise SnapshotError("cannot find default snapshot class")
            if len(defaults) > 1:
                raise SnapshotError(f"{len(defaults)} default snapshot classes were found")
        except SnapshotError as exc:
            message = f"Failed to set default snapshot class with error {exc}"
            await self._snapshot_error(snapshot, "SetDefaultSnapshotClassFailed", message, ready_false=False)
            return Result(requeue_after=RETRY_SECONDS)
        patch = {"spec": {"volumeSnapshotClassName": _name(defaults[0])}}
        await self.client.patch(VOLUME_SNAPSHOTS, _name(snapshot), patch, objects.namespace_of(snapshot))
        log.info("snapshot %s: default class %s", object_key(snapshot), _name(defaults[0]))
        return None

    def _volume_of(self, snapshot: Object) -> Object:
        """getVolumeFromVolumeSnapshot: the bound PV of the source claim."""
        pvc_name = str(_source(snapshot).get("persistentVolumeClaimName") or "")
        pvc = self.claims.get(f"{objects.namespace_of(snapshot)}/{pvc_name}")
        if pvc is None:
            missing = vs.go_quote(f'persistentvolumeclaim "{pvc_name}" not found')
            raise SnapshotError(f"failed to retrieve PVC {pvc_name} from the lister: {missing}")
        if objects.status(pvc).get("phase") != "Bound":
            raise SnapshotError(f"the PVC {pvc_name} is not yet bound to a PV, will not attempt to take a snapshot")
        pv_name = str(objects.spec(pvc).get("volumeName") or "")
        pv = self.volumes.get(pv_name)
        if pv is None:
            missing = vs.go_quote(f'persistentvolumes "{pv_name}" not found')
            raise SnapshotError(f"failed to retrieve PV {pv_name} from the API server: {missing}")
        ref = objects.spec(pv).get("claimRef") or {}
        if ref.get("name") != pvc_name or ref.get("namespace") != objects.namespace_of(pvc):
            raise SnapshotError("claim in dataSource not bound or invalid")
        if ref.get("uid") and ref.get("uid") != objects.uid_of(pvc):
            raise SnapshotError("claim in dataSource not bound or invalid")
        return pv

    async def _add_snapshot_finalizers(self, snapshot: Object, content: Object | None) -> Object:
        """checkandAddSnapshotFinalizers: as-source always; bound once bound to a content with policy Delete."""
        finalizers = _finalizers(snapshot)
        wanted = [vs.AS_SOURCE_FINALIZER]
        bound = objects.status(snapshot).get("boundVolumeSnapshotContentName")
        if content is not None and bound and objects.spec(content).get("deletionPolicy") == "Delete":
            wanted.append(vs.BOUND_FINALIZER)
        missing = [f for f in wanted if f not in finalizers]
        if not missing:
            return snapshot
        return await self._write_finalizers(VOLUME_SNAPSHOTS, snapshot, finalizers + missing)

    async def _create_content(self, snapshot: Object) -> Result | None:
        """createSnapshotContent: the PVC's finalizer first, then the content the sidecar takes the snapshot for."""
        try:
            await self._protect_claim(snapshot)
            snapshot_class = self.classes.get(str(objects.spec(snapshot).get("volumeSnapshotClassName") or ""))
            if snapshot_class is None:
                raise SnapshotError(f"failed to take snapshot {_name(snapshot)} without a snapshot class")
            try:
                pv = self._volume_of(snapshot)
                _driver_of(pv, snapshot)
            except SnapshotError as exc:
                wrapped = vs.go_quote(str(exc))
                raise SnapshotError(
                    f"failed to get input parameters to create snapshot {_name(snapshot)}: {wrapped}"
                ) from exc
        except SnapshotError as exc:
            message = f"Failed to create snapshot content with error {exc}"
            await self._snapshot_error(snapshot, "SnapshotContentCreationFailed", message)
            return Result(requeue_after=RETRY_SECONDS)
        content = new_content(snapshot, snapshot_class, _name(pv))
        try:
            content = await self.client.create(VOLUME_SNAPSHOT_CONTENTS, content)
        except AlreadyExists:
            pass
        message = f"Waiting for a snapshot {object_key(snapshot)} to be created by the CSI driver."
        self.recorder.event(snapshot, NORMAL, "CreatingSnapshot", message)
        log.info("snapshot %s: created content %s", object_key(snapshot), _name(content))
        await self._update_snapshot_status(snapshot, content)
        return None

    async def _bind_pre_provisioned(self, snapshot: Object, content: Object | None) -> Result | None:
        """A snapshot of an existing content: bound when the content names it, else an error and a retry."""
        name = str(_source(snapshot).get("volumeSnapshotContentName"))
        if content is None:
            await self._snapshot_error(snapshot, "SnapshotContentMissing", "VolumeSnapshotContent is missing")
            return Result(requeue_after=RETRY_SECONDS)
        if (objects.spec(content).get("source") or {}).get("volumeHandle"):
            message = "VolumeSnapshotContent is dynamically provisioned while expecting a pre-provisioned one"
            await self._snapshot_error(snapshot, "SnapshotContentMismatch", message)
            return None
        ref = objects.spec(content).get("volumeSnapshotRef") or {}
        if not ref.get("uid"):
            bound_ref = {**ref, "uid": objects.uid_of(snapshot)}
            content = await self.client.patch(
                VOLUME_SNAPSHOT_CONTENTS, name, {"spec": {"volumeSnapshotRef": bound_ref}}
            )
        await self._update_snapshot_status(snapshot, content)
        return None

    async def _update_snapshot_status(self, snapshot: Object, content: Object) -> None:
        """updateSnapshotStatus: bound name, then the content's creation time, readiness, size and error."""
        old = objects.status(snapshot)
        status = dict(old)
        status["boundVolumeSnapshotContentName"] = _name(content)
        content_status = objects.status(content)
        if content_status.get("creationTime") is not None:
            status["creationTime"] = _rfc3339(int(content_status["creationTime"]))
        ready = bool(content_status.get("readyToUse"))
        status["readyToUse"] = ready
        if content_status.get("restoreSize") is not None and not old.get("restoreSize"):
            status["restoreSize"] = vs.restore_size_quantity(int(content_status["restoreSize"]))
        if content_status.get("error"):
            status["error"] = content_status["error"]
        elif ready:
            status.pop("error", None)
        if status == dict(old):
            return
        patch: dict[str, Any] = {"status": {**status, "error": status.get("error")}}
        await self.client.patch(
            VOLUME_SNAPSHOTS, _name(snapshot), patch, objects.namespace_of(snapshot), subresource="status"
        )
        key = object_key(snapshot)
        if not old.get("creationTime") and status.get("creationTime"):
            message = f"Snapshot {key} was successfully created by the CSI driver."
            self.recorder.event(snapshot, NORMAL, "SnapshotCreated", message)
        if not old.get("readyToUse") and ready:
            self.recorder.event(snapshot, NORMAL, "SnapshotReady", f"Snapshot {key} is ready to use.")
            log.info("snapshot %s: ready (content %s)", key, _name(content))

    async def _delete_snapshot(self, snapshot: Object) -> Result | None:
        """processSnapshotWithDeletionTimestamp: the content goes too (policy Delete), then the finalizers."""
        finalizers = _finalizers(snapshot)
        if vs.AS_SOURCE_FINALIZER not in finalizers and vs.BOUND_FINALIZER not in finalizers:
            return None
        content = self._content_of(snapshot)
        if content is not None and self._being_restored(snapshot):
            self.recorder.event(snapshot, WARNING, "SnapshotDeletePending", "Snapshot is being used to restore a PVC")
            return Result(requeue_after=RETRY_SECONDS)
        delete_content = content is not None and objects.spec(content).get("deletionPolicy") == "Delete"
        if content is not None:
            await self._mark_being_deleted(content)
        if content is not None and delete_content and not objects.is_marked_for_deletion(content):
            try:
                await self.client.delete(VOLUME_SNAPSHOT_CONTENTS, _name(content))
            except NotFound:
                pass
            log.info("snapshot %s: deleting content %s", object_key(snapshot), _name(content))
        await self._release_claim(snapshot, skip_current=True)
        # The bound finalizer stays until the content it deletes is gone (its removal requeues this snapshot).
        drop = {vs.AS_SOURCE_FINALIZER} | (set() if delete_content else {vs.BOUND_FINALIZER})
        await self._write_finalizers(VOLUME_SNAPSHOTS, snapshot, [f for f in finalizers if f not in drop])
        return None

    def _being_restored(self, snapshot: Object) -> bool:
        """isVolumeBeingCreatedFromSnapshot: a Pending claim of the namespace names it as its data source."""
        for pvc in self.claims.items():
            if objects.namespace_of(pvc) != objects.namespace_of(snapshot):
                continue
            if vs.snapshot_data_source(pvc) == _name(snapshot) and objects.status(pvc).get("phase") == "Pending":
                return True
        return False

    # ------------------------------------------------------------------------------------------------ source claim

    async def _protect_claim(self, snapshot: Object) -> None:
        """ensurePVCFinalizer: the source claim cannot go away while its snapshot is being taken."""
        name = str(_source(snapshot).get("persistentVolumeClaimName") or "")
        pvc = self.claims.get(f"{objects.namespace_of(snapshot)}/{name}")
        if pvc is None:
            raise SnapshotError(
                f"{CONTROLLER_UPDATE_FAILED} {_name(snapshot)} on API server: cannot get claim from snapshot"
            )
        finalizers = _finalizers(pvc)
        if vs.PVC_FINALIZER in finalizers:
            return
        if objects.is_marked_for_deletion(pvc):
            message = "cannot add finalizer on claim because it is being deleted"
            raise SnapshotError(f"{CONTROLLER_UPDATE_FAILED} {name} on API server: {message}")
        await self._write_finalizers(PERSISTENT_VOLUME_CLAIMS, pvc, [*finalizers, vs.PVC_FINALIZER])

    async def _release_claim(self, snapshot: Object, *, skip_current: bool) -> None:
        """checkandRemovePVCFinalizer: the claim's finalizer goes once no snapshot of it is still being taken."""
        name = _source(snapshot).get("persistentVolumeClaimName")
        if not name:
            return
        namespace = objects.namespace_of(snapshot)
        pvc = self.claims.get(f"{namespace}/{name}")
        if pvc is None or vs.PVC_FINALIZER not in _finalizers(pvc):
            return
        for other in self.snapshots.items():
            if objects.namespace_of(other) != namespace or (skip_current and _name(other) == _name(snapshot)):
                continue
            if _source(other).get("persistentVolumeClaimName") == name and not _ready(other):
                return
        await self._write_finalizers(
            PERSISTENT_VOLUME_CLAIMS, pvc, [f for f in _finalizers(pvc) if f != vs.PVC_FINALIZER]
        )
        log.info("claim %s/%s: released by its snapshots", namespace, name)

    # ------------------------------------------------------------------------------------------------ contents

    async def _sync_content(self, name: str) -> Result | None:
        content = self.contents.get(name)
        if content is None:
            return None
        if objects.is_marked_for_deletion(content):
            return await self._delete_content(content)
        source = objects.spec(content).get("source") or {}
        if ("volumeHandle" in source) == ("snapshotHandle" in source):
            message = "Exactly one of VolumeHandle and SnapshotHandle should be specified"
            self.recorder.event(content, WARNING, "ContentValidationError", message)
            return None
        ref = objects.spec(content).get("volumeSnapshotRef") or {}
        if not ref.get("uid"):
            return None  # pre-bound: the snapshot's sync binds it
        if vs.CONTENT_FINALIZER not in _finalizers(content):
            content = await self._write_finalizers(
                VOLUME_SNAPSHOT_CONTENTS, content, [*_finalizers(content), vs.CONTENT_FINALIZER]
            )
        snapshot = self.snapshots.get(f"{ref.get('namespace')}/{ref.get('name')}")
        if snapshot is not None and objects.uid_of(snapshot) == ref.get("uid"):
            if objects.is_marked_for_deletion(snapshot):
                await self._mark_being_deleted(content)
                return None
        if objects.spec(content).get("driver") != PROVISIONER_NAME or objects.status(content).get("readyToUse"):
            return None
        return await self._take_snapshot(content)

    async def _take_snapshot(self, content: Object) -> Result | None:
        """The sidecar's createSnapshot: the volume's data copied, then the content's status."""
        source = objects.spec(content).get("source") or {}
        handle = str(source.get("snapshotHandle") or _name(content))
        started = time.time_ns()
        try:
            if source.get("volumeHandle"):
                pv = self.volumes.get(str(source["volumeHandle"]))
                if pv is None:
                    raise ProvisioningError(f'persistentvolumes "{source["volumeHandle"]}" not found')
                await self.provisioner.create_snapshot(pv, handle)
                size = vb.capacity_bytes(pv)
            else:
                size = self.provisioner.snapshot_size(handle)
        except ProvisioningError as exc:
            volume = source.get("volumeHandle") or handle
            message = (
                f"Failed to create snapshot: failed to take snapshot of the volume {volume}: {vs.go_quote(str(exc))}"
            )
            await self._content_error(content, "SnapshotCreationFailed", message)
            return Result(requeue_after=RETRY_SECONDS)
        status = {
            "snapshotHandle": handle,
            "creationTime": started,
            "readyToUse": True,
            "restoreSize": size,
            "error": None,
        }
        await self.client.patch(VOLUME_SNAPSHOT_CONTENTS, _name(content), {"status": status}, subresource="status")
        log.info("content %s: snapshot %s taken (%d bytes)", _name(content), handle, size)
        return None

    async def _delete_content(self, content: Object) -> Result | None:
        """The sidecar's deletion: the data goes with policy Delete, then the finalizer, once the content may go."""
        if vs.CONTENT_FINALIZER not in _finalizers(content):
            return None
        if not self._content_deletable(content):
            return None
        handle = objects.status(content).get("snapshotHandle")
        if objects.spec(content).get("deletionPolicy") == "Delete" and handle:
            if objects.spec(content).get("driver") != PROVISIONER_NAME:
                return None  # another driver's snapshot: its own sidecar deletes it
            try:
                await self.provisioner.delete_snapshot(str(handle))
            except (OSError, ProvisioningError) as exc:
                self.sidecar_recorder.event(content, WARNING, "SnapshotDeleteError", "Failed to delete snapshot")
                log.warning("content %s: deleting snapshot %s failed: %s", _name(content), handle, exc)
                return Result(requeue_after=RETRY_SECONDS)
        finalizers = [f for f in _finalizers(content) if f != vs.CONTENT_FINALIZER]
        await self._write_finalizers(VOLUME_SNAPSHOT_CONTENTS, content, finalizers)
        log.info("content %s: deleted (policy %s)", _name(content), objects.spec(content).get("deletionPolicy"))
        return None

    def _content_deletable(self, content: Object) -> bool:
        """shouldDelete, plus: a content whose snapshot is gone may go (else nothing would ever release it)."""
        ref = objects.spec(content).get("volumeSnapshotRef") or {}
        if vs.BEING_DELETED_ANNOTATION in _annotations(content) or not ref.get("uid"):
            return True
        snapshot = self.snapshots.get(f"{ref.get('namespace')}/{ref.get('name')}")
        return snapshot is None or objects.uid_of(snapshot) != ref.get("uid")

    async def _mark_being_deleted(self, content: Object) -> None:
        if vs.BEING_DELETED_ANNOTATION in _annotations(content):
            return
        patch = {"metadata": {"annotations": {vs.BEING_DELETED_ANNOTATION: "yes"}}}
        try:
            await self.client.patch(VOLUME_SNAPSHOT_CONTENTS, _name(content), patch)
        except NotFound:
            pass

    # ------------------------------------------------------------------------------------------------ writes

    async def _snapshot_error(self, snapshot: Object, reason: str, message: str, *, ready_false: bool = True) -> None:
        """updateSnapshotErrorStatusWithEvent: the error (once per message) and a Warning event."""
        status = objects.status(snapshot)
        if (status.get("error") or {}).get("message") == message:
            return
        patch: dict[str, Any] = {"status": {"error": {"message": message, "time": format_time(datetime.now(UTC))}}}
        if ready_false:
            patch["status"]["readyToUse"] = False
        try:
            await self.client.patch(
                VOLUME_SNAPSHOTS, _name(snapshot), patch, objects.namespace_of(snapshot), subresource="status"
            )
        except NotFound:
            return
        self.recorder.event(snapshot, WARNING, reason, message)
        log.warning("snapshot %s: %s: %s", object_key(snapshot), reason, message)

    async def _content_error(self, content: Object, reason: str, message: str) -> None:
        """updateContentErrorStatusWithEvent."""
        if ((objects.status(content).get("error") or {}).get("message")) == message:
            return
        error = {"message": message, "time": format_time(datetime.now(UTC))}
        patch = {"status": {"error": error, "readyToUse": False}}
        await self.client.patch(VOLUME_SNAPSHOT_CONTENTS, _name(content), patch, subresource="status")
        self.sidecar_recorder.event(content, WARNING, reason, message)
        log.warning("content %s: %s: %s", _name(content), reason, message)

    async def _write_finalizers(self, resource: Any, obj: Object, finalizers: list[str]) -> Object:
        """Finalizers with the object's resourceVersion: a stale view fails (Conflict) and is retried."""
        meta = objects.metadata(obj)
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}}
        try:
            return await self.client.patch(resource, _name(obj), patch, meta.get("namespace"))
        except NotFound:
            return obj


def _source(snapshot: Object) -> dict[str, Any]:
    return dict(objects.spec(snapshot).get("source") or {})


def _ready(snapshot: Object) -> bool:
    return bool(objects.status(snapshot).get("readyToUse"))


def _class_not_found(name: str) -> str:
    return f'volumesnapshotclass.snapshot.storage.k8s.io "{name}" not found'


def _driver_of(pv: Object, snapshot: Object) -> str:
    """The CSI driver of a volume: ours are hostPath volumes our provisioner annotated."""
    driver = str(_annotations(pv).get(vb.PROVISIONED_BY) or "")
    if driver != PROVISIONER_NAME:
        raise SnapshotError(f"snapshotting non-CSI volumes is not supported, snapshot:{object_key(snapshot)}")
    return driver


def new_content(snapshot: Object, snapshot_class: Object, volume_handle: str) -> Object:
    """The VolumeSnapshotContent createSnapshotContent makes for a dynamically provisioned snapshot."""
    meta = objects.metadata(snapshot)
    return {
        "apiVersion": vs.API_VERSION,
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": vs.content_name_for(snapshot)},
        "spec": {
            "volumeSnapshotRef": {
                "apiVersion": vs.API_VERSION,
                "kind": "VolumeSnapshot",
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "source": {"volumeHandle": volume_handle},
            "volumeSnapshotClassName": _name(snapshot_class),
            "deletionPolicy": snapshot_class.get("deletionPolicy"),
            "driver": snapshot_class.get("driver"),
        },
    }


def restore_source(
    pvc: Object, sc: Object, snapshots: Informer, contents: Informer, provisioner: LocalPathProvisioner
) -> Path | None:
    """external-provisioner's getSnapshotSource: the data of the snapshot a claim restores (None: no snapshot)."""
    name = vs.snapshot_data_source(pvc)
    if not name:
        return None
    prefix = f"error getting handle for DataSource Type VolumeSnapshot by Name {name}: "
    snapshot = snapshots.get(f"{objects.namespace_of(pvc)}/{name}")
    if snapshot is None:
        missing = f'volumesnapshots.snapshot.storage.k8s.io "{name}" not found'
        raise ProvisioningError(f"{prefix}error getting snapshot {name} from api server: {missing}")
    if objects.is_marked_for_deletion(snapshot) and vs.AS_SOURCE_FINALIZER not in _finalizers(snapshot):
        raise ProvisioningError(f"{prefix}snapshot {name} is being deleted")
    bound = objects.status(snapshot).get("boundVolumeSnapshotContentName")
    content = contents.get(str(bound)) if bound else None
    ref = (objects.spec(content).get("volumeSnapshotRef") or {}) if content is not None else {}
    if content is None or ref.get("uid") != objects.uid_of(snapshot) or ref.get("name") != name:
        raise ProvisioningError(f"{prefix}snapshot {name} not bound")
    if objects.spec(content).get("driver") != sc.get("provisioner"):
        raise ProvisioningError(f"{prefix}snapshot {name} not bound")
    if not objects.status(snapshot).get("readyToUse"):
        raise ProvisioningError(f"{prefix}snapshot {name} is not Ready")
    handle = objects.status(content).get("snapshotHandle")
    if not handle:
        raise ProvisioningError(f"{prefix}snapshot handle {name} is not available")
    restore_size = objects.status(snapshot).get("restoreSize")
    if restore_size is not None:
        wanted, size = vb.requested_bytes(pvc), vb.to_bytes(restore_size)
        if wanted < size:
            message = f"requested volume size {wanted} is less than the size {size} for the source snapshot {name}"
            raise ProvisioningError(prefix + message)
    return provisioner.snapshot_dir(str(handle))
