"""Which VolumeSnapshotClass snapshots a StorageClass's volumes (KubeVirt's getVolumeSnapshotClassName)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"


class AmbiguousSnapshotClass(Exception):
    """Several classes have the StorageClass's driver and none is the default."""


def snapshot_class_name(
    storage_class_name: str, storage_class: Mapping[str, Any] | None, classes: Iterable[Mapping[str, Any]]
) -> str:
    """The class whose driver is the StorageClass's provisioner: the only one, else the default one; "" for none."""
    if storage_class is None:
        return ""
    provisioner = storage_class.get("provisioner")
    matches = [vsc for vsc in classes if vsc.get("driver") == provisioner]
    if not matches:
        return ""
    if len(matches) == 1:
        return str(matches[0]["metadata"]["name"])
    for vsc in matches:
        if DEFAULT_CLASS_ANNOTATION in ((vsc.get("metadata") or {}).get("annotations") or {}):
            return str(vsc["metadata"]["name"])
    raise AmbiguousSnapshotClass(f"{len(matches)} matching VolumeSnapshotClasses for {storage_class_name}")
