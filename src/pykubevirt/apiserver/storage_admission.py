"""kube-apiserver's storage strategies and admission plugins for PVs, PVCs and StorageClasses.

Defaults and validation (api.storage_validation), and the admission plugins a kube-apiserver enables by default:
DefaultStorageClass (a claim without a class gets the default one), StorageObjectInUseProtection (the
`kubernetes.io/pvc-protection` and `kubernetes.io/pv-protection` finalizers) and PersistentVolumeClaimResize (only
claims of a class that allows expansion grow).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pykubevirt.api import errors
from pykubevirt.api import storage_validation as sv
from pykubevirt.api import volume_binding as vb
from pykubevirt.apiserver.resources import Resource

if TYPE_CHECKING:
    from pykubevirt.apiserver.request_context import RequestContext
    from pykubevirt.apiserver.store import Store

STORAGE_CLASSES = "storage.k8s.io/storageclasses"
RESIZE_FORBIDDEN = (
    "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
)
_KINDS = {("", "PersistentVolumeClaim"), ("", "PersistentVolume"), ("storage.k8s.io", "StorageClass")}


def _add_finalizer(obj: dict[str, Any], finalizer: str) -> None:
    meta = obj.setdefault("metadata", {})
    finalizers = list(meta.get("finalizers") or [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)
    meta["finalizers"] = finalizers


class StorageAdmission:
    """Defaults, validation and the storage admission plugins; reads StorageClasses from the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def handles(self, resource: Resource) -> bool:
        return resource.builtin and (resource.group, resource.kind) in _KINDS

    def _storage_class(self, name: str) -> dict[str, Any] | None:
        record = self.store.get(STORAGE_CLASSES, name)
        return record.value if record is not None else None

    def mutate(
        self,
        resource: Resource,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        ctx: RequestContext,
    ) -> dict[str, Any]:
        if resource.kind == "StorageClass":
            sv.default_storage_class(obj)
        elif resource.kind == "PersistentVolume":
            obj.setdefault("spec", {}).setdefault("persistentVolumeReclaimPolicy", "Retain")
            obj["spec"].setdefault("volumeMode", "Filesystem")
            if operation == "CREATE":
                sv.default_pv(obj)
                _add_finalizer(obj, vb.PV_PROTECTION)
        elif resource.kind == "PersistentVolumeClaim":
            obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
            if operation == "CREATE":
                sv.default_pvc(obj)
                sv.normalize_data_sources(obj)
                self._default_class(obj)
                _add_finalizer(obj, vb.PVC_PROTECTION)
        return obj

    def _default_class(self, pvc: dict[str, Any]) -> None:
        """DefaultStorageClass: only a claim that names no class at all (not even "") gets the default."""
        annotations = (pvc.get("metadata") or {}).get("annotations") or {}
        if "storageClassName" in pvc["spec"] or vb.BETA_STORAGE_CLASS in annotations:
            return
        found = vb.default_class(record.value for record in self.store.records(STORAGE_CLASSES))
        if found is not None:
            pvc["spec"]["storageClassName"] = found["metadata"]["name"]

    def validate(
        self,
        resource: Resource,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        ctx: RequestContext,
    ) -> list[str]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if resource.kind == "StorageClass":
            found = sv.validate_storage_class_update(obj, old) if old else sv.validate_storage_class(obj)
        elif resource.kind == "PersistentVolume":
            found = sv.validate_pv_update(obj, old) if old else sv.validate_pv(obj)
        else:
            found = sv.validate_pvc_update(obj, old) if old else sv.validate_pvc(obj)
        if found:
            raise errors.invalid(resource.kind, resource.group, name, [cause.to_dict() for cause in found])
        if resource.kind == "PersistentVolumeClaim" and old is not None:
            self._check_resize(resource, obj, old, name)
        return []

    def _check_resize(self, resource: Resource, new: dict[str, Any], old: dict[str, Any], name: str) -> None:
        """PersistentVolumeClaimResize: growing needs a bound claim of a class with allowVolumeExpansion."""
        if vb.requested_bytes(new) <= vb.requested_bytes(old):
            return
        sc = self._storage_class(vb.storage_class_of(old))
        if not (old.get("spec") or {}).get("volumeName") or sc is None or not sc.get("allowVolumeExpansion"):
            raise errors.forbidden(
                f'{resource.plural} "{name}" is forbidden: {RESIZE_FORBIDDEN}', plural=resource.plural, name=name
            )
