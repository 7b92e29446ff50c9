"""A restore's part in backend storage: the VM's persistent EFI and TPM claim is restored like its disks, the restored
claim takes over the VM's `persistent-state-for` label, and the claim it replaced goes once the restore is done.

After reconcileBackendVolume and deleteObsoleteBackendPVC in KubeVirt's `pkg/storage/snapshot/restore.go`. The target
is always the snapshot's own VM: the restore admitter refuses another target, and clones, for such VMs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import backend_storage as bs
from pykubevirt.api.generated_names import generated_name
from pykubevirt.api.guarded_patch import guarded_set
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS
from pykubevirt.controller.backend_storage import index_claim_owners, labelled_claims
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.restore")

# Marks the claim a restore replaced, so that the restore deletes it when done.
CLEANUP_LABEL = "restore.kubevirt.io/cleanup-backend-pvc"


class RestoreBackendError(Exception):
    """The restored claim is missing; the message says which."""


def cleanup_value(target_name: str) -> str:
    return generated_name(bs.PVC_PREFIX, target_name)


def restored_entry(restore: Mapping[str, Any], snapshot_vm: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The restore's entry for the snapshot VM's backend-storage claim, None when the snapshot did not take it."""
    volume = bs.vm_volume_name(str((snapshot_vm.get("metadata") or {}).get("name", "")))
    restores = (restore.get("status") or {}).get("restores") or []
    return next((r for r in restores if r.get("volumeName") == volume), None)


class RestoredBackendClaims:
    """Hands a VM's backend-storage label to its restored claim, and deletes the claim it replaced."""

    def __init__(self, client: KubeClient, pvcs: Informer) -> None:
        self.client = client
        self.pvcs = pvcs
        index_claim_owners(pvcs)

    async def hand_over(self, restore: Object, snapshot_vm: Mapping[str, Any]) -> bool:
        """Move the label onto the restored claim; True while the move is on its way to the cache."""
        if not bs.vm_needs(snapshot_vm):
            return False
        entry = restored_entry(restore, snapshot_vm)
        if entry is None:
            log.warning(
                "the snapshot holds no backend-storage volume (its class may have no VolumeSnapshotClass): "
                "the VM keeps its current firmware state",
                extra=object_fields(restore),
            )
            return False
        namespace = restore["metadata"]["namespace"]
        restored = self.pvcs.get(f"{namespace}/{entry['persistentVolumeClaim']}")
        if restored is None:
            raise RestoreBackendError(f"pvc {namespace}/{entry['persistentVolumeClaim']} does not exist and should")
        target = str(((restore.get("spec") or {}).get("target") or {}).get("name", ""))
        labels = restored["metadata"].get("labels")
        if (labels or {}).get(bs.PVC_PREFIX) == target:
            return False
        for pvc in labelled_claims(self.pvcs, namespace, target):
            if pvc["metadata"]["name"] == restored["metadata"]["name"]:
                continue
            before = pvc["metadata"].get("labels") or {}
            after = {k: v for k, v in before.items() if k != bs.PVC_PREFIX}
            after[CLEANUP_LABEL] = cleanup_value(target)
            await self._patch_labels(pvc, before, after)
            log.info(
                "backend-storage claim %s replaced by the restore",
                pvc["metadata"]["name"],
                extra=object_fields(restore),
            )
        await self._patch_labels(restored, labels, {**(labels or {}), bs.PVC_PREFIX: target})
        log.info(
            "restored claim %s holds the VM's firmware state",
            restored["metadata"]["name"],
            extra=object_fields(restore),
        )
        return True

    async def delete_replaced(self, restore: Object, target: Mapping[str, Any]) -> None:
        """Delete the claims this restore's target replaced (deleteObsoleteBackendPVC)."""
        if not bs.vm_needs(target):
            return
        namespace = restore["metadata"]["namespace"]
        value = cleanup_value(str(target["metadata"]["name"]))
        for pvc in self.pvcs.items():
            meta = pvc["metadata"]
            if meta.get("namespace") != namespace or (meta.get("labels") or {}).get(CLEANUP_LABEL) != value:
                continue
            try:
                await self.client.delete(PERSISTENT_VOLUME_CLAIMS, meta["name"], namespace)
            except NotFound:
                continue
            log.info("deleted the replaced backend-storage claim %s", meta["name"], extra=object_fields(restore))

    async def _patch_labels(self, pvc: Object, before: Mapping[str, str] | None, after: Mapping[str, str]) -> None:
        meta = pvc["metadata"]
        await self.client.patch(
            PERSISTENT_VOLUME_CLAIMS,
            meta["name"],
            guarded_set("/metadata/labels", dict(before or {}), dict(after)),
            meta["namespace"],
            patch_type=JSON_PATCH,
        )
