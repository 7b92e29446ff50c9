"""A VM's `status.volumeSnapshotStatuses`: which of its volumes (and its backend-storage claim) a snapshot can take,
and why not the others.

After KubeVirt's updateVolumeSnapshotStatuses (`pkg/storage/snapshot/snapshot.go`), written by virt-controller's VM
controller with the rest of the VM's status rather than as a write of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pykubevirt.client.api import Object
from pykubevirt.controller.volume_snapshot_class import AmbiguousSnapshotClass

Lookup = Callable[[str], Object | None]


class VolumeSnapshotStatuses:
    """Computes the statuses from lookups of claims and DataVolumes (by `namespace/name`) and of snapshot classes."""

    def __init__(
        self,
        pvcs: Lookup,
        data_volumes: Lookup,
        snapshot_class: Callable[[str], str],
        backend_volume: Callable[[Object], Mapping[str, Any] | None] = lambda vm: None,
    ) -> None:
        self.pvcs = pvcs
        self.data_volumes = data_volumes
        self.snapshot_class = snapshot_class
        self.backend_volume = backend_volume

    def __call__(self, vm: Object) -> list[dict[str, Any]]:
        volumes = ((vm.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
        # The backend-storage claim is listed last, as GetVolumes WithAllVolumes adds it.
        backend = self.backend_volume(vm)
        return [self._status(vm, volume) for volume in [*volumes, *([backend] if backend is not None else [])]]

    def _status(self, vm: Object, volume: Mapping[str, Any]) -> dict[str, Any]:
        name = str(volume.get("name", ""))
        if not any(volume.get(kind) is not None for kind in ("persistentVolumeClaim", "dataVolume", "memoryDump")):
            return _disabled(name, f"Snapshot is not supported for this volumeSource type [{name}]")
        try:
            storage_class = self._storage_class(vm, volume)
            snapshot_class = self.snapshot_class(storage_class)
        except (LookupError, AmbiguousSnapshotClass) as exc:
            return _disabled(name, str(exc.args[0]))
        if not snapshot_class:
            return _disabled(
                name,
                "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass "
                f"[{storage_class}] [{name}]",
            )
        return {"name": name, "enabled": True}

    def _storage_class(self, vm: Object, volume: Mapping[str, Any]) -> str:
        namespace = str(vm["metadata"].get("namespace", ""))
        claim = (volume.get("persistentVolumeClaim") or volume.get("memoryDump") or {}).get("claimName")
        if claim:
            return self._claim_class(f"{namespace}/{claim}")
        dv_name = str((volume.get("dataVolume") or {}).get("name", ""))
        dv = self.data_volumes(f"{namespace}/{dv_name}")
        if dv is None:
            return self._claim_class(f"{namespace}/{dv_name}")
        # KubeVirt reads spec.pvc's class only, then the VM's template of the DataVolume, then the claim.
        named = ((dv.get("spec") or {}).get("pvc") or {}).get("storageClassName")
        if named:
            return str(named)
        for template in (vm.get("spec") or {}).get("dataVolumeTemplates") or []:
            if (template.get("metadata") or {}).get("name") == dv_name:
                named = ((template.get("spec") or {}).get("pvc") or {}).get("storageClassName")
                if named:
                    return str(named)
        return self._claim_class(f"{namespace}/{dv_name}")

    def _claim_class(self, key: str) -> str:
        pvc = self.pvcs(key)
        if pvc is None:
            raise LookupError("PVC not found")
        return str((pvc.get("spec") or {}).get("storageClassName") or "")


def _disabled(name: str, reason: str) -> dict[str, Any]:
    return {"name": name, "enabled": False, "reason": reason}
