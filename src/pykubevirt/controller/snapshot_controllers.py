"""virt-controller's snapshot, restore and clone controllers, run only where the cluster serves their APIs.

KubeVirt's own CRDs (snapshot.kubevirt.io) come with it; the CSI snapshot API (snapshot.storage.k8s.io) comes with
the cluster's storage, or not: without it snapshots record the VM's spec and no claim (KubeVirt's dummy informers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Controller, own_key
from pykubevirt.client.errors import NotFound
from pykubevirt.client.events import EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import (
    VM_CLONES,
    VM_RESTORES,
    VM_SNAPSHOT_CONTENTS,
    VM_SNAPSHOTS,
    VOLUME_SNAPSHOT_CLASSES,
    VOLUME_SNAPSHOTS,
    ResourceRef,
)
from pykubevirt.controller.backend_storage import NoBackendClaim, vm_backend_volume
from pykubevirt.controller.vm_clone_controller import VMCloneController
from pykubevirt.controller.vm_restore_controller import VMRestoreController
from pykubevirt.controller.vm_snapshot_controller import SnapshotClasses, VMSnapshotController
from pykubevirt.controller.volume_snapshot_statuses import VolumeSnapshotStatuses

log = logging.getLogger("pykubevirt.controller")

WORKERS = 3


@dataclass(slots=True)
class SharedCaches:
    """The informers virt-controller already runs that snapshots and restores read."""

    vms: Informer
    vmis: Informer
    pods: Informer
    pvcs: Informer
    data_volumes: Informer
    storage_classes: Informer
    revisions: Informer


async def served(client: KubeClient, resource: ResourceRef) -> bool:
    """Whether the API server serves the resource (its group-version's discovery lists it)."""
    try:
        found = await client.request("GET", f"/apis/{resource.group}/{resource.version}")
    except NotFound:
        return False
    return any(r.get("name") == resource.plural for r in (found or {}).get("resources") or [])


async def snapshot_controllers(
    client: KubeClient, shared: SharedCaches
) -> tuple[list[Informer], list[Controller], VolumeSnapshotStatuses | None]:
    """The informers and controllers to run for the APIs this cluster serves (none without snapshot.kubevirt.io), and
    what computes the VMs' volumeSnapshotStatuses."""
    if not await served(client, VM_SNAPSHOTS):
        log.info("snapshot.kubevirt.io is not served: no snapshot or restore controllers")
        return [], [], None
    snapshots, contents, restores = (
        Informer(client, VM_SNAPSHOTS),
        Informer(client, VM_SNAPSHOT_CONTENTS),
        Informer(client, VM_RESTORES),
    )
    informers = [snapshots, contents, restores]
    volume_snapshots: Informer | None = None
    classes: Informer | None = None
    if await served(client, VOLUME_SNAPSHOTS):
        volume_snapshots, classes = Informer(client, VOLUME_SNAPSHOTS), Informer(client, VOLUME_SNAPSHOT_CLASSES)
        informers += [volume_snapshots, classes]
    else:
        log.info("snapshot.storage.k8s.io is not served: snapshots will hold no volumes")
    snapshot = VMSnapshotController(
        client,
        snapshots=snapshots,
        contents=contents,
        vms=shared.vms,
        vmis=shared.vmis,
        pvcs=shared.pvcs,
        data_volumes=shared.data_volumes,
        pods=shared.pods,
        revisions=shared.revisions,
        classes=SnapshotClasses(shared.storage_classes, classes),
        volume_snapshots=volume_snapshots,
        recorder=EventRecorder(client, "snapshot-controller"),
    )
    restore = VMRestoreController(
        client,
        restores=restores,
        snapshots=snapshots,
        contents=contents,
        vms=shared.vms,
        vmis=shared.vmis,
        pvcs=shared.pvcs,
        data_volumes=shared.data_volumes,
        storage_classes=shared.storage_classes,
        revisions=shared.revisions,
        volume_snapshots=volume_snapshots,
        recorder=EventRecorder(client, "restore-controller"),
    )
    snapshot_queue = Controller("vmsnapshot", snapshot, workers=WORKERS)
    snapshot_queue.watch(snapshots).watch(contents, snapshot.keys_for_content)
    snapshot_queue.watch(shared.vms, snapshot.keys_for_vm).watch(shared.vmis, snapshot.keys_for_vm)
    content_queue = Controller("vmsnapshotcontent", snapshot.content_reconciler, workers=WORKERS)
    content_queue.watch(contents).watch(snapshots, snapshot.content_keys_for_snapshot)
    if volume_snapshots is not None:
        content_queue.watch(volume_snapshots, snapshot.content_keys_for_volume_snapshot)
    restore_queue = Controller("vmrestore", restore, workers=WORKERS)
    restore_queue.watch(restores, own_key).watch(shared.vms, restore.keys_for_target)
    restore_queue.watch(shared.vmis, restore.keys_for_target)
    restore_queue.watch(shared.pvcs, restore.keys_for_claim).watch(shared.data_volumes, restore.keys_for_claim)
    restore_queue.watch(snapshots, lambda s: _restores_of_snapshot(restore, s))
    queues = [snapshot_queue, content_queue, restore_queue]
    if await served(client, VM_CLONES):
        clones = Informer(client, VM_CLONES)
        informers.append(clones)
        cloner = VMCloneController(
            client,
            clones=clones,
            vms=shared.vms,
            snapshots=snapshots,
            contents=contents,
            restores=restores,
            pvcs=shared.pvcs,
            recorder=EventRecorder(client, "clone-controller"),
        )
        clone_queue = Controller("vmclone", cloner, workers=WORKERS)
        clone_queue.watch(clones).watch(snapshots, cloner.keys_for_owned).watch(restores, cloner.keys_for_owned)
        clone_queue.watch(shared.vms, cloner.keys_for_vm)
        queues.append(clone_queue)

    def backend_volume(vm: Object) -> Object | None:
        try:
            return vm_backend_volume(shared.pvcs, vm)
        except NoBackendClaim:
            return None  # upstream lists the VM's other volumes without it

    statuses = VolumeSnapshotStatuses(
        shared.pvcs.get, shared.data_volumes.get, snapshot.classes.for_storage_class, backend_volume
    )
    return informers, queues, statuses


def _restores_of_snapshot(restore: VMRestoreController, snapshot: Object) -> list[str]:
    namespace, name = snapshot["metadata"].get("namespace", ""), snapshot["metadata"]["name"]
    return [
        f"{namespace}/{r['metadata']['name']}"
        for r in restore.restores.items()
        if r["metadata"].get("namespace") == namespace
        and (r.get("spec") or {}).get("virtualMachineSnapshotName") == name
    ]
