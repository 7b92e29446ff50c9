"""kube-controller-manager's persistent-volume binder, PVC/PV protection and (for our provisioner) the resizer.

Upstream: `pkg/controller/volume/persistentvolume/pv_controller.go` (syncClaim, syncVolume, bind, reclaim),
`pkg/controller/volume/pvcprotection` and `pvprotection`, and external-provisioner/external-resizer for the
`pykubevirt.io/local-path` class (restores from VolumeSnapshots too). Keys are `claim:<namespace>/<name>` and
`volume:<name>` on one queue, so binding decisions are serial.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pykubevirt.api import objects
from pykubevirt.api import volume_binding as vb
from pykubevirt.api import volume_snapshot as vs
from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import AlreadyExists, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from pykubevirt.storage.local_provisioner import PROVISIONER_NAME, LocalPathProvisioner, ProvisioningError
from pykubevirt.storage.volume_snapshot_controller import restore_source

log = logging.getLogger("pykubevirt.storage.pv_controller")

CLAIM = "claim:"
VOLUME = "volume:"
RETRY_SECONDS = 5.0
EXTERNAL_PROVISIONING_MESSAGE = (
    "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system "
    "administrator. If volume creation is delayed, please verify that the provisioner is running and correctly "
    "registered."
)
WAIT_FOR_CONSUMER_MESSAGE = "waiting for first consumer to be created before binding"
NO_CLASS_MESSAGE = "no persistent volumes available for this claim and no storage class is set"
CLAIM_LOST_MESSAGE = "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
CLAIM_INDEX = "claims"


def claims_of_pod(pod: Object) -> list[str]:
    """`namespace/claim` of every PVC volume of a pod (the pvc-protection controller's index)."""
    namespace = objects.metadata(pod).get("namespace", "")
    found = []
    for volume in objects.spec(pod).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            found.append(f"{namespace}/{claim}")
    return found


def _pod_in_use(pod: Object) -> bool:
    return objects.status(pod).get("phase") not in ("Succeeded", "Failed")


def _name(obj: Object) -> str:
    return str(objects.metadata(obj).get("name", ""))


class PVController:
    """Binds claims to volumes, provisions, reclaims, protects and expands; one worker (keys as above)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        claims: Informer,
        volumes: Informer,
        classes: Informer,
        pods: Informer,
        recorder: EventRecorder,
        provisioner: LocalPathProvisioner | None = None,
    ) -> None:
        self.client = client
        self.claims = claims
        self.volumes = volumes
        self.classes = classes
        self.pods = pods
        self.recorder = recorder
        self.provisioner = provisioner
        # Set by the storage component when it runs the snapshotter: claims restored from snapshots read them.
        self.snapshots: Informer | None = None
        self.snapshot_contents: Informer | None = None
        self._told_waiting: set[str] = set()

    def claims_restoring(self, snapshot: Object) -> list[str]:
        """Unbound claims of the snapshot's namespace restored from it: its readiness is what they wait for."""
        namespace, name = objects.namespace_of(snapshot), _name(snapshot)
        return [
            CLAIM + object_key(pvc)
            for pvc in self.claims.items()
            if objects.namespace_of(pvc) == namespace
            and not objects.spec(pvc).get("volumeName")
            and vs.snapshot_data_source(pvc) == name
        ]

    async def reconcile(self, key: str) -> Result | None:
        if key.startswith(CLAIM):
            return await self._sync_claim(key.removeprefix(CLAIM))
        return await self._sync_volume(key.removeprefix(VOLUME))

    # ------------------------------------------------------------------------------------------------ claims

    async def _sync_claim(self, key: str) -> Result | None:
        pvc = self.claims.get(key)
        if pvc is None:
            return None
        if objects.spec(pvc).get("volumeName"):
            self._told_waiting.discard(objects.uid_of(pvc))
        if objects.is_marked_for_deletion(pvc):
            await self._release_claim_protection(pvc)
            return None
        volume_name = objects.spec(pvc).get("volumeName")
        if volume_name:
            return await self._sync_bound_claim(pvc, str(volume_name))
        return await self._sync_unbound_claim(pvc)

    async def _sync_bound_claim(self, pvc: Object, volume_name: str) -> Result | None:
        pv = self.volumes.get(volume_name)
        if pv is None:
            if objects.status(pvc).get("phase") == "Bound":
                await self._claim_status(pvc, "Lost")
                self.recorder.event(pvc, WARNING, "ClaimLost", CLAIM_LOST_MESSAGE)
            return None
        ref = objects.spec(pv).get("claimRef") or {}
        if ref and not vb.pre_bound_to(pv, pvc):
            if objects.status(pvc).get("phase") == "Bound":
                await self._claim_status(pvc, "Lost")
                self.recorder.event(
                    pvc,
                    WARNING,
                    "ClaimMisbound",
                    "Two claims are bound to the same volume, this one is bound incorrectly",
                )
            return None
        await self._bind(pvc, pv)
        return await self._expand(pvc, pv)

    async def _sync_unbound_claim(self, pvc: Object) -> Result | None:
        class_name = vb.storage_class_of(pvc)
        sc = self.classes.get(class_name) if class_name else None
        node = str((objects.metadata(pvc).get("annotations") or {}).get(vb.SELECTED_NODE) or "")
        delayed = sc is not None and sc.get("volumeBindingMode") == vb.WAIT_FOR_FIRST_CONSUMER
        if delayed and not node:
            # The scheduler binds or asks for provisioning once a pod uses the claim.
            await self._claim_status(pvc, "Pending")
            # Said once per claim: every volume event re-syncs pending claims, and each repeat would be a write.
            if objects.uid_of(pvc) not in self._told_waiting:
                self._told_waiting.add(objects.uid_of(pvc))
                self.recorder.event(pvc, NORMAL, "WaitForFirstConsumer", WAIT_FOR_CONSUMER_MESSAGE)
            return None
        node_allows = (lambda pv: _allows_node(pv, node)) if delayed else None
        pv = vb.find_matching_volume(pvc, self.volumes.items(), node_allows)
        if pv is not None:
            await self._bind(pvc, pv)
            return None
        await self._claim_status(pvc, "Pending")
        if sc is None:
            if class_name:
                message = f'storageclass.storage.k8s.io "{class_name}" not found'
                self.recorder.event(pvc, WARNING, "ProvisioningFailed", message)
            else:
                self.recorder.event(pvc, NORMAL, "FailedBinding", NO_CLASS_MESSAGE)
            return None
        return await self._provision(pvc, sc, node)

    async def _provision(self, pvc: Object, sc: Object, node: str) -> Result | None:
        provisioner = str(sc.get("provisioner") or "")
        annotations = objects.metadata(pvc).get("annotations") or {}
        if annotations.get(vb.STORAGE_PROVISIONER) != provisioner:
            patch = {
                "metadata": {
                    "annotations": {vb.STORAGE_PROVISIONER: provisioner, vb.BETA_STORAGE_PROVISIONER: provisioner}
                }
            }
            pvc = await self._patch_claim(pvc, patch) or pvc
            self.recorder.event(pvc, NORMAL, "ExternalProvisioning", EXTERNAL_PROVISIONING_MESSAGE.format(provisioner))
        if provisioner != PROVISIONER_NAME or self.provisioner is None:
            return None  # another provisioner's claim: an external one (or an administrator) makes its volume
        pv_name = f"pvc-{objects.uid_of(pvc)}"
        if self.volumes.get(pv_name) is not None:
            return None  # made already; its informer event binds it
        self.recorder.event(
            pvc, NORMAL, "Provisioning", f'External provisioner is provisioning volume for claim "{object_key(pvc)}"'
        )
        try:
            source = self._restore_source(pvc, sc)
            pv = await self.provisioner.provision(copy_json(pvc), copy_json(sc), node, source)
        except ProvisioningError as exc:
            message = f'failed to provision volume with StorageClass "{_name(sc)}": {exc}'
            self.recorder.event(pvc, WARNING, "ProvisioningFailed", message)
            log.warning("%s: %s", object_key(pvc), message)
            return Result(requeue_after=RETRY_SECONDS)
        try:
            await self.client.create(PERSISTENT_VOLUMES, pv)
        except AlreadyExists:
            return None
        self.recorder.event(pvc, NORMAL, "ProvisioningSucceeded", f"Successfully provisioned volume {pv_name}")
        log.info("provisioned %s for %s", pv_name, object_key(pvc))
        return None

    def _restore_source(self, pvc: Object, sc: Object) -> Path | None:
        """The snapshot data a claim is restored from (None for a blank volume)."""
        if not vs.snapshot_data_source(pvc) or self.provisioner is None:
            return None
        if self.snapshots is None or self.snapshot_contents is None:
            raise ProvisioningError("volume snapshots are not served by this cluster's storage")
        return restore_source(pvc, sc, self.snapshots, self.snapshot_contents, self.provisioner)

    async def _bind(self, pvc: Object, pv: Object) -> None:
        """bind(): the volume's claimRef and phase first, then the claim's volumeName, annotations and status."""
        pvc_meta = objects.metadata(pvc)
        if not vb.pre_bound_to(pv, pvc) or not (objects.spec(pv).get("claimRef") or {}).get("uid"):
            ref = {
                "kind": "PersistentVolumeClaim",
                "namespace": pvc_meta.get("namespace"),
                "name": pvc_meta.get("name"),
                "uid": pvc_meta.get("uid"),
                "apiVersion": "v1",
                "resourceVersion": pvc_meta.get("resourceVersion"),
            }
            patch: dict[str, Any] = {"spec": {"claimRef": ref}}
            if not objects.spec(pv).get("claimRef"):
                patch["metadata"] = {"annotations": {vb.BOUND_BY_CONTROLLER: "yes"}}
            pv = await self.client.patch(PERSISTENT_VOLUMES, _name(pv), patch)
        if objects.status(pv).get("phase") != "Bound":
            pv = await self._volume_status(pv, "Bound")
        annotations = pvc_meta.get("annotations") or {}
        if objects.spec(pvc).get("volumeName") != _name(pv) or annotations.get(vb.BIND_COMPLETED) != "yes":
            claim_patch: dict[str, Any] = {
                "spec": {"volumeName": _name(pv)},
                "metadata": {"annotations": {vb.BIND_COMPLETED: "yes"}},
            }
            if not objects.spec(pvc).get("volumeName"):
                claim_patch["metadata"]["annotations"][vb.BOUND_BY_CONTROLLER] = "yes"
            pvc = await self._patch_claim(pvc, claim_patch) or pvc
        status = objects.status(pvc)
        wanted = {
            "phase": "Bound",
            "accessModes": list(objects.spec(pv).get("accessModes") or []),
            "capacity": dict(objects.spec(pv).get("capacity") or {}),
        }
        if any(status.get(k) != v for k, v in wanted.items()):
            await self._patch_claim(pvc, {"status": wanted}, subresource="status")
            log.info("bound %s to %s", object_key(pvc), _name(pv))

    async def _expand(self, pvc: Object, pv: Object) -> Result | None:
        """The resizer's part for our volumes: a larger request grows the volume, then the claim's capacity."""
        wanted = vb.requested_bytes(pvc)
        if wanted <= vb.to_bytes((objects.status(pvc).get("capacity") or {}).get("storage")):
            return None
        sc = self.classes.get(vb.storage_class_of(pvc))
        if sc is None or not sc.get("allowVolumeExpansion") or sc.get("provisioner") != PROVISIONER_NAME:
            return None
        if self.provisioner is None:
            return None
        request = objects.spec(pvc)["resources"]["requests"]["storage"]
        if vb.capacity_bytes(pv) < wanted:
            self.recorder.event(pvc, NORMAL, "Resizing", f"External resizer is resizing volume {_name(pv)}")
            try:
                await self.provisioner.expand(copy_json(pv), wanted)
            except ProvisioningError as exc:
                self.recorder.event(
                    pvc,
                    WARNING,
                    "VolumeResizeFailed",
                    f'resize volume "{_name(pv)}" by resizer "{PROVISIONER_NAME}" failed: {exc}',
                )
                return Result(requeue_after=RETRY_SECONDS)
            await self.client.patch(PERSISTENT_VOLUMES, _name(pv), {"spec": {"capacity": {"storage": request}}})
        await self._patch_claim(pvc, {"status": {"capacity": {"storage": request}}}, subresource="status")
        message = f'resize volume "{_name(pv)}" by resizer "{PROVISIONER_NAME}" completed successfully'
        self.recorder.event(pvc, NORMAL, "VolumeResizeSuccessful", message)
        return None

    async def _release_claim_protection(self, pvc: Object) -> None:
        """pvc-protection: a deleted claim keeps its finalizer while a pod that is not finished uses it."""
        finalizers = list(objects.metadata(pvc).get("finalizers") or [])
        if vb.PVC_PROTECTION not in finalizers:
            return
        users = [p for p in self.pods.by_index(CLAIM_INDEX, object_key(pvc)) if _pod_in_use(p)]
        if users:
            return
        finalizers.remove(vb.PVC_PROTECTION)
        await self._patch_claim(
            pvc,
            {"metadata": {"finalizers": finalizers, "resourceVersion": objects.metadata(pvc).get("resourceVersion")}},
        )

    # ------------------------------------------------------------------------------------------------ volumes

    async def _sync_volume(self, name: str) -> Result | None:
        pv = self.volumes.get(name)
        if pv is None:
            return None
        ref = objects.spec(pv).get("claimRef") or {}
        pvc = self.claims.get(vb.claim_ref_key(pv)) if ref else None
        claimed = pvc is not None and (not ref.get("uid") or ref.get("uid") == objects.uid_of(pvc))
        if objects.is_marked_for_deletion(pv):
            if ref and not claimed and objects.status(pv).get("phase") == "Bound":
                pv = await self._volume_status(pv, "Released")
            await self._release_volume_protection(pv)
            return None
        if not ref:
            if objects.status(pv).get("phase") != "Available":
                await self._volume_status(pv, "Available")
            return None
        if pvc is not None and claimed:
            if objects.spec(pvc).get("volumeName") != name:
                return await self._sync_claim(object_key(pvc))
            if objects.status(pv).get("phase") != "Bound":
                await self._volume_status(pv, "Bound")
            return None
        if not ref.get("uid"):
            # Pre-bound by an administrator to a claim that does not exist yet.
            if objects.status(pv).get("phase") != "Available":
                await self._volume_status(pv, "Available")
            return None
        return await self._reclaim(pv)

    async def _reclaim(self, pv: Object) -> Result | None:
        """The claim is gone: the volume is Released, then deleted (Delete) or kept for an administrator (Retain)."""
        phase = objects.status(pv).get("phase")
        if phase not in ("Released", "Failed"):
            pv = await self._volume_status(pv, "Released")
        policy = objects.spec(pv).get("persistentVolumeReclaimPolicy")
        if policy != "Delete" or phase == "Failed":
            return None
        provisioned_by = (objects.metadata(pv).get("annotations") or {}).get(vb.PROVISIONED_BY)
        if provisioned_by != PROVISIONER_NAME or self.provisioner is None:
            if provisioned_by:
                return None  # its external provisioner deletes it
            message = (
                f'error getting deleter volume plugin for volume "{_name(pv)}": no deletable volume plugin matched'
            )
            await self._volume_status(pv, "Failed", message=message, reason="VolumeFailedDelete")
            self.recorder.event(pv, WARNING, "VolumeFailedDelete", message)
            return None
        try:
            await self.provisioner.delete(copy_json(pv))
        except ProvisioningError as exc:
            await self._volume_status(pv, "Failed", message=str(exc), reason="VolumeFailedDelete")
            self.recorder.event(pv, WARNING, "VolumeFailedDelete", str(exc))
            return None
        try:
            await self.client.delete(PERSISTENT_VOLUMES, _name(pv))
        except NotFound:
            pass
        log.info("deleted released volume %s", _name(pv))
        return None

    async def _release_volume_protection(self, pv: Object) -> None:
        """pv-protection: a deleted volume keeps its finalizer while it is bound to a claim."""
        finalizers = list(objects.metadata(pv).get("finalizers") or [])
        if vb.PV_PROTECTION not in finalizers or objects.status(pv).get("phase") == "Bound":
            return
        finalizers.remove(vb.PV_PROTECTION)
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": objects.metadata(pv).get("resourceVersion")}}
        try:
            await self.client.patch(PERSISTENT_VOLUMES, _name(pv), patch)
        except (NotFound, Conflict):
            pass

    # ------------------------------------------------------------------------------------------------ writes

    async def _claim_status(self, pvc: Object, phase: str) -> None:
        if objects.status(pvc).get("phase") != phase:
            await self._patch_claim(pvc, {"status": {"phase": phase}}, subresource="status")

    async def _patch_claim(self, pvc: Object, patch: dict[str, Any], subresource: str = "") -> Object | None:
        meta = objects.metadata(pvc)
        try:
            return await self.client.patch(
                PERSISTENT_VOLUME_CLAIMS, str(meta["name"]), patch, str(meta.get("namespace")), subresource=subresource
            )
        except NotFound:
            return None

    async def _volume_status(self, pv: Object, phase: str, *, message: str = "", reason: str = "") -> Object:
        status: dict[str, Any] = {"phase": phase, "message": message or None, "reason": reason or None}
        return await self.client.patch(PERSISTENT_VOLUMES, _name(pv), {"status": status}, subresource="status")


def _allows_node(pv: Object, node: str) -> bool:
    """A volume's node affinity admits the node (by its hostname label, which is its name here)."""
    terms = vb.node_affinity_terms(pv)
    if not terms:
        return True
    return any(_term_allows(term, node) for term in terms)


def _term_allows(term: Any, node: str) -> bool:
    for expression in term.get("matchExpressions") or []:
        if expression.get("key") != "kubernetes.io/hostname":
            continue
        values: Iterable[str] = expression.get("values") or []
        inside = node in values
        if (expression.get("operator") == "In" and not inside) or (expression.get("operator") == "NotIn" and inside):
            return False
    return True
