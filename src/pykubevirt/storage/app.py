"""The embedded cluster's storage: informers, the PV controller, the local-path provisioner and its snapshotter.

Only an embedded cluster runs this (`pykubevirt virt-controller --embedded-storage DIR`); on a real cluster the
kube-controller-manager, the CSI driver and its sidecars do the same jobs.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Controller, run_until_failure
from pykubevirt.client.errors import AlreadyExists, ApiError
from pykubevirt.client.events import EventRecorder
from pykubevirt.client.informer import EventHandler, Informer, object_key
from pykubevirt.client.resources import (
    DATA_SOURCES,
    DATA_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    STORAGE_CLASSES,
    VOLUME_SNAPSHOT_CLASSES,
    VOLUME_SNAPSHOT_CONTENTS,
    VOLUME_SNAPSHOTS,
)
from pykubevirt.storage.data_source import DataSourceController
from pykubevirt.storage.datavolume_claim import CDI_LABEL, CLONE_OWNER_REF
from pykubevirt.storage.datavolume_controller import DataVolumeController
from pykubevirt.storage.local_provisioner import (
    PROVISIONER_NAME,
    LocalPathProvisioner,
    default_classes,
    default_snapshot_classes,
)
from pykubevirt.storage.pv_controller import CLAIM, CLAIM_INDEX, VOLUME, PVController, claims_of_pod
from pykubevirt.storage.upload_controller import UploadController, upload_server_claim, upload_target_key
from pykubevirt.storage.volume_snapshot_controller import CONTENT, SNAPSHOT, VolumeSnapshotController

log = logging.getLogger("pykubevirt.storage")


def _claim_key(obj: Object) -> list[str]:
    return [CLAIM + object_key(obj)]


def _volume_key(obj: Object) -> list[str]:
    return [VOLUME + object_key(obj)]


def _claim_ref_key(obj: Object) -> list[str]:
    ref = (obj.get("spec") or {}).get("claimRef") or {}
    return [f"{CLAIM}{ref.get('namespace', '')}/{ref.get('name', '')}"] if ref else []


def _bound_volume_key(obj: Object) -> list[str]:
    name = (obj.get("spec") or {}).get("volumeName")
    return [VOLUME + str(name)] if name else []


def _owning_data_volume(pvc: Object) -> list[str]:
    namespace = (pvc.get("metadata") or {}).get("namespace", "")
    refs = (pvc.get("metadata") or {}).get("ownerReferences") or []
    return [f"{namespace}/{r['name']}" for r in refs if r.get("kind") == "DataVolume" and r.get("controller")]


def _content_key(content: Object) -> list[str]:
    return [CONTENT + object_key(content)]


def _bound_content_key(snapshot: Object) -> list[str]:
    name = (snapshot.get("status") or {}).get("boundVolumeSnapshotContentName")
    return [CONTENT + str(name)] if name else []


def _referenced_snapshot_key(content: Object) -> list[str]:
    ref = (content.get("spec") or {}).get("volumeSnapshotRef") or {}
    return [f"{SNAPSHOT}{ref.get('namespace', '')}/{ref.get('name', '')}"] if ref.get("name") else []


def _importer_claim(pod: Object) -> list[str]:
    meta = pod.get("metadata") or {}
    role = (meta.get("labels") or {}).get(CDI_LABEL)
    if role == "cdi-clone-source":
        # In the source's namespace, it names the target claim (and so its DataVolume) by annotation.
        target = (meta.get("annotations") or {}).get(CLONE_OWNER_REF)
        return [str(target)] if target else []
    if role not in ("importer", "cdi-upload-server"):
        return []
    refs = meta.get("ownerReferences") or []
    return [f"{meta.get('namespace', '')}/{r['name']}" for r in refs if r.get("kind") == "PersistentVolumeClaim"]


class StorageController:
    """PV binding, provisioning, reclaim, protection and expansion for one embedded cluster."""

    def __init__(self, client: KubeClient, storage_dir: Path | None) -> None:
        self.client = client
        self.claims = Informer(client, PERSISTENT_VOLUME_CLAIMS)
        self.volumes = Informer(client, PERSISTENT_VOLUMES)
        self.classes = Informer(client, STORAGE_CLASSES)
        self.pods = Informer(client, PODS)
        self.pods.add_indexer(CLAIM_INDEX, claims_of_pod)
        self.recorder = EventRecorder(client, "persistentvolume-controller")
        self.provisioner = LocalPathProvisioner(storage_dir) if storage_dir is not None else None
        self.reconciler = PVController(
            client,
            claims=self.claims,
            volumes=self.volumes,
            classes=self.classes,
            pods=self.pods,
            recorder=self.recorder,
            provisioner=self.provisioner,
        )
        self.controller = Controller("persistentvolume", self.reconciler, workers=1)
        self.controller.watch(self.claims, _claim_key).watch(self.claims, _bound_volume_key)
        self.controller.watch(self.volumes, _volume_key).watch(self.volumes, _claim_ref_key)
        # A volume without a claim may be what a pending claim waits for.
        self.controller.watch(self.volumes, self._unbound_claims)
        self.controller.watch(self.pods, lambda pod: [CLAIM + key for key in claims_of_pod(pod)])
        # A new class can make pending claims provisionable.
        self.controller.watch(self.classes, lambda sc: [CLAIM + key for key in self.claims.keys()])
        # CDI's part: DataVolumes, their claims and importer pods.
        self.data_volumes = Informer(client, DATA_VOLUMES)
        self.data_sources = Informer(client, DATA_SOURCES)
        self.dv_recorder = EventRecorder(client, "datavolume-controller")
        self.dv_reconciler = DataVolumeController(
            client,
            data_volumes=self.data_volumes,
            claims=self.claims,
            pods=self.pods,
            recorder=self.dv_recorder,
            data_sources=self.data_sources,
        )
        self.dv_controller = Controller("datavolume", self.dv_reconciler, workers=2)
        self.dv_controller.watch(self.data_volumes).watch(self.claims, _owning_data_volume)
        self.dv_controller.watch(self.pods, _importer_claim)
        # A DataVolume with a sourceRef waits for its DataSource to name a source.
        self.dv_controller.watch(self.data_sources, self.dv_reconciler.referencing)
        # CDI's upload controller: claims marked as upload targets that no DataVolume owns.
        self.upload_recorder = EventRecorder(client, "upload-controller")
        self.upload_reconciler = UploadController(
            client, claims=self.claims, pods=self.pods, recorder=self.upload_recorder
        )
        self.upload_controller = Controller("upload", self.upload_reconciler, workers=2)
        self.upload_controller.watch(self.claims, upload_target_key).watch(self.pods, upload_server_claim)
        self.ds_reconciler = DataSourceController(
            client, data_sources=self.data_sources, claims=self.claims, data_volumes=self.data_volumes
        )
        self.ds_controller = Controller("datasource", self.ds_reconciler, workers=1)
        self.ds_controller.watch(self.data_sources).watch(self.data_sources, self.ds_reconciler.referencing)
        self.ds_controller.watch(self.claims, self.ds_reconciler.naming_claim)
        self.ds_controller.watch(self.data_volumes, self.ds_reconciler.naming_claim)
        self.informers = [self.claims, self.volumes, self.classes, self.pods, self.data_volumes, self.data_sources]
        self.snapshot_controller: Controller | None = None
        if self.provisioner is not None:
            self._add_snapshotter(self.provisioner)

    def _add_snapshotter(self, provisioner: LocalPathProvisioner) -> None:
        """external-snapshotter's snapshot-controller and CSI sidecar, and restores in the PV controller."""
        self.snapshots = Informer(self.client, VOLUME_SNAPSHOTS)
        self.snapshot_contents = Informer(self.client, VOLUME_SNAPSHOT_CONTENTS)
        self.snapshot_classes = Informer(self.client, VOLUME_SNAPSHOT_CLASSES)
        self.snapshot_recorder = EventRecorder(self.client, "snapshot-controller")
        self.sidecar_recorder = EventRecorder(self.client, f"csi-snapshotter {PROVISIONER_NAME}")
        reconciler = VolumeSnapshotController(
            self.client,
            snapshots=self.snapshots,
            contents=self.snapshot_contents,
            classes=self.snapshot_classes,
            claims=self.claims,
            volumes=self.volumes,
            recorder=self.snapshot_recorder,
            sidecar_recorder=self.sidecar_recorder,
            provisioner=provisioner,
        )
        controller = Controller("volumesnapshot", reconciler, workers=2)
        controller.watch(self.snapshots, lambda s: [SNAPSHOT + object_key(s)]).watch(self.snapshots, _bound_content_key)
        controller.watch(self.snapshot_contents, _content_key).watch(self.snapshot_contents, _referenced_snapshot_key)
        controller.watch(self.snapshot_classes, reconciler.unready_snapshots)
        controller.watch(self.claims, reconciler.snapshots_of_claim)
        self.snapshot_controller = controller
        self.reconciler.snapshots = self.snapshots
        self.reconciler.snapshot_contents = self.snapshot_contents
        # A claim restored from a snapshot waits for it to be ready. Not a watch of the PV controller's: binding must
        # not wait for the snapshot informers to sync (a cluster without the snapshot CRDs never syncs them).
        self.snapshots.add_handler(
            EventHandler(
                on_add=self._enqueue_restoring,
                on_update=lambda old, new: self._enqueue_restoring(new),
                on_delete=self._enqueue_restoring,
            )
        )
        self.informers += [self.snapshots, self.snapshot_contents, self.snapshot_classes]

    def _enqueue_restoring(self, snapshot: Object) -> None:
        for key in self.reconciler.claims_restoring(snapshot):
            self.controller.queue.add(key)

    def _unbound_claims(self, pv: Object) -> list[str]:
        if (pv.get("spec") or {}).get("claimRef"):
            return []
        return [CLAIM + object_key(c) for c in self.claims.items() if not (c.get("spec") or {}).get("volumeName")]

    async def ensure_default_classes(self) -> None:
        """Create the `local` and `shared` classes and the `local-snapshots` VolumeSnapshotClass unless they exist
        (an administrator may have changed them)."""
        if self.provisioner is None:
            return
        for sc in default_classes():
            try:
                await self.client.create(STORAGE_CLASSES, sc)
            except AlreadyExists:
                continue
            log.info("created StorageClass %s", sc["metadata"]["name"])
        for snapshot_class in default_snapshot_classes():
            try:
                await self.client.create(VOLUME_SNAPSHOT_CLASSES, snapshot_class)
            except AlreadyExists:
                continue
            except ApiError as exc:
                # Without the snapshot CRDs (or the right to write them) volumes still work; snapshots cannot.
                log.warning("cannot create VolumeSnapshotClass %s: %s", snapshot_class["metadata"]["name"], exc)
                continue
            log.info("created VolumeSnapshotClass %s", snapshot_class["metadata"]["name"])

    async def run(self) -> None:
        await self.ensure_default_classes()
        tasks = [asyncio.create_task(i.run(), name=f"storage-informer-{i.resource.plural}") for i in self.informers]
        tasks.append(asyncio.create_task(self.controller.run(), name="persistentvolume-controller"))
        tasks.append(asyncio.create_task(self.dv_controller.run(), name="datavolume-controller"))
        tasks.append(asyncio.create_task(self.ds_controller.run(), name="datasource-controller"))
        tasks.append(asyncio.create_task(self.upload_controller.run(), name="upload-controller"))
        if self.snapshot_controller is not None:
            tasks.append(asyncio.create_task(self.snapshot_controller.run(), name="volumesnapshot-controller"))
        try:
            await run_until_failure(tasks)
        finally:
            await self.recorder.flush()
            await self.dv_recorder.flush()
            await self.upload_recorder.flush()
            if self.snapshot_controller is not None:
                await self.snapshot_recorder.flush()
                await self.sidecar_recorder.flush()
