"""kube-apiserver's Table printers for the storage kinds: PersistentVolumeClaims, PersistentVolumes, StorageClasses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pykubevirt.api.quantity import QuantityError, canonical
from pykubevirt.apiserver.printers import AGE, NAME, Table, age_cell, column, name_cell, printed_table

_ACCESS_MODES = (
    ("ReadWriteOnce", "RWO"),
    ("ReadOnlyMany", "ROX"),
    ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
)


def access_modes(modes: list[str] | None) -> str:
    """GetAccessModesAsString: short names in a fixed order, duplicates dropped."""
    present = set(modes or ())
    return ",".join(short for mode, short in _ACCESS_MODES if mode in present)


def _quantity(value: Any) -> str:
    if value is None:
        return "0"
    try:
        return canonical(value)
    except QuantityError:
        return str(value)


def _storage_class(obj: dict[str, Any]) -> str:
    # The beta annotation predates spec.storageClassName and still wins over it.
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    beta = annotations.get("volume.beta.kubernetes.io/storage-class")
    if beta is not None:
        return str(beta)
    return str((obj.get("spec") or {}).get("storageClassName") or "")


def _terminating_phase(obj: dict[str, Any]) -> str:
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return str((obj.get("status") or {}).get("phase", ""))


PVC_COLUMNS = [
    NAME,
    column("Status", "Pending, Bound or Lost (Terminating while being deleted)."),
    column("Volume", "The persistent volume bound to the claim."),
    column("Capacity", "The storage the bound volume provides."),
    column("Access Modes", "The access modes of the bound volume."),
    column("StorageClass", "The storage class of the claim."),
    column("VolumeAttributesClass", "The volume attributes class of the claim."),
    AGE,
    column("VolumeMode", "Filesystem or Block.", priority=1),
]


def pvc_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get persistentvolumeclaims (-o wide)."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        volume = spec.get("volumeName") or ""
        capacity = modes = ""
        if volume:  # capacity and modes describe the bound volume, so only a bound claim shows them
            capacity = _quantity((status.get("capacity") or {}).get("storage"))
            modes = access_modes(status.get("accessModes"))
        return [
            name_cell(obj),
            _terminating_phase(obj),
            volume,
            capacity,
            modes,
            _storage_class(obj),
            spec.get("volumeAttributesClassName") or "<unset>",
            age_cell(obj, now),
            spec.get("volumeMode") or "<unset>",
        ]

    return printed_table(PVC_COLUMNS, row, objects, now)


PV_COLUMNS = [
    NAME,
    column("Capacity", "The storage the volume provides."),
    column("Access Modes", "The ways the volume can be mounted."),
    column("Reclaim Policy", "What happens to the volume when its claim is released."),
    column("Status", "Available, Bound, Released or Failed (Terminating while being deleted)."),
    column("Claim", "The claim bound to the volume, as namespace/name."),
    column("StorageClass", "The storage class of the volume."),
    column("VolumeAttributesClass", "The volume attributes class of the volume."),
    column("Reason", "Why the volume is in its phase, when it failed."),
    AGE,
    column("VolumeMode", "Filesystem or Block.", priority=1),
]


def pv_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get persistentvolumes (-o wide)."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        claim_ref = spec.get("claimRef")
        claim = f"{claim_ref.get('namespace', '')}/{claim_ref.get('name', '')}" if claim_ref else ""
        capacity = _quantity((spec.get("capacity") or {}).get("storage"))
        modes = access_modes(spec.get("accessModes"))
        attributes_class = spec.get("volumeAttributesClassName") or "<unset>"
        return [
            name_cell(obj),
            capacity,
            modes,
            spec.get("persistentVolumeReclaimPolicy", ""),
            _terminating_phase(obj),
            claim,
            _storage_class(obj),
            attributes_class,
            status.get("reason", ""),
            age_cell(obj, now),
            spec.get("volumeMode") or "<unset>",
        ]

    return printed_table(PV_COLUMNS, row, objects, now)


STORAGECLASS_COLUMNS = [
    NAME,
    column("Provisioner", "The volume plugin that provisions volumes of this class."),
    column("ReclaimPolicy", "The reclaim policy given to provisioned volumes."),
    column("VolumeBindingMode", "Immediate, or WaitForFirstConsumer to bind when a pod uses the claim."),
    column("AllowVolumeExpansion", "Whether claims of this class may be resized."),
    AGE,
]
_DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)


def storageclass_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get storageclasses; the default class's name ends in " (default)"."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        name = name_cell(obj)
        if any(annotations.get(a) == "true" for a in _DEFAULT_CLASS_ANNOTATIONS):
            name += " (default)"
        return [
            name,
            obj.get("provisioner", ""),
            obj.get("reclaimPolicy") or "Delete",
            obj.get("volumeBindingMode") or "Immediate",
            bool(obj.get("allowVolumeExpansion")),
            age_cell(obj, now),
        ]

    return printed_table(STORAGECLASS_COLUMNS, row, objects, now)
