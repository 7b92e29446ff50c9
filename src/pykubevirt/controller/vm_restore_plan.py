"""What a VirtualMachineRestore makes: claim names, the claims from VolumeSnapshots, and the restored VM.

Pure functions over plain objects, after KubeVirt's `pkg/storage/snapshot/restore.go`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.generated_names import generated_name
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.quantity import parse_quantity
from pykubevirt.controller.vmi_from_vm import controller_ref, legacy_firmware_uuid

RESTORE_FINALIZER = "snapshot.kubevirt.io/vmrestore-protection"
POPULATED_FOR_ANNOTATION = "cdi.kubevirt.io/storage.populatedFor"
PRE_POPULATED_ANNOTATION = "cdi.kubevirt.io/storage.prePopulated"
CONTENT_TYPE_ANNOTATION = "cdi.kubevirt.io/storage.contentType"
LAST_RESTORE_ANNOTATION = "restore.kubevirt.io/lastRestoreUID"
RESTORE_NAME_ANNOTATION = "restore.kubevirt.io/name"
OWNED_BY_VM_ANNOTATION = "restore.kubevirt.io/owned-by-vm"
SOURCE_NAME_LABEL = "restore.kubevirt.io/source-vm-name"
SOURCE_NAMESPACE_LABEL = "restore.kubevirt.io/source-vm-namespace"
BACKEND_PVC_LABEL = "persistent-state-for"
GRACE_PERIOD_SECONDS = 300.0

# Annotations of the source claim that belong to its provisioning, not to its data.
DROPPED_ANNOTATION_PREFIXES = (
    "pv.kubernetes.io",
    "volume.beta.kubernetes.io",
    "cdi.kubevirt.io",
    "volume.kubernetes.io",
    "k8s.io/CloneRequest",
    "k8s.io/CloneOf",
)

WAIT_EVENTUALLY = "Waiting for target VM to be powered off. Please stop the restore target to proceed with restore"
STOP_TARGET = "Automatically stopping restore target for restore operation"
VMI_EXISTS = "Restore target VMI still exists, please stop the restore target to proceed with restore"
TARGET_NOT_READY_FAILURE = "Restore target VMI must be powered off before restore operation"
GRACE_PERIOD_EXCEEDED = (
    "Restore target failed to be ready within 5m0s. Please power off the target VM before attempting restore"
)
WAIT_GRACE_PERIOD = (
    "Waiting for target VM to be powered off. Please stop the restore target to proceed with restore, "
    "or the operation will fail after 5m0s"
)
RESTORE_TO_EXISTING_TARGET = "restore source and restore target are different but restore target already exists"


def restore_marker(restore: Mapping[str, Any]) -> str:
    meta = restore["metadata"]
    return f"{meta['name']}-{meta.get('uid', '')}"


def has_last_restore(restore: Mapping[str, Any], obj: Mapping[str, Any] | None) -> bool:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(LAST_RESTORE_ANNOTATION) == restore_marker(restore)


def restored_volume_name(restore: Mapping[str, Any], volume: str, claim: str) -> str:
    """The claim or DataVolume name a volume is restored into (overrides, then volumeRestorePolicy)."""
    spec = restore.get("spec") or {}
    for override in spec.get("volumeRestoreOverrides") or []:
        if override.get("volumeName") == volume and override.get("restoreName"):
            return str(override["restoreName"])
    policy = spec.get("volumeRestorePolicy")
    if policy == "InPlace":
        return claim
    if policy == "PrefixTargetName":
        return generated_name(str((spec.get("target") or {}).get("name", "")), volume)
    return f"restore-{restore['metadata'].get('uid', '')}-{volume}"


def volume_restores(restore: Mapping[str, Any], backups: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`status.restores`: one per volume backup, keeping what earlier passes recorded."""
    recorded = {r.get("volumeName"): r for r in ((restore.get("status") or {}).get("restores") or [])}
    restores = []
    for backup in backups:
        volume = str(backup.get("volumeName"))
        if volume in recorded:
            restores.append(copy_json(recorded[volume]))
            continue
        claim = str(((backup.get("persistentVolumeClaim") or {}).get("metadata") or {}).get("name", ""))
        restores.append(
            {
                "volumeName": volume,
                "persistentVolumeClaim": restored_volume_name(restore, volume, claim),
                "volumeSnapshotName": backup.get("volumeSnapshotName"),
            }
        )
    return restores


def snapshot_claim(
    name: str, namespace: str, backup: Mapping[str, Any], volume_snapshot: Mapping[str, Any]
) -> dict[str, Any]:
    """A claim filled from a volume backup's VolumeSnapshot (CreateRestorePVCDef): the backed-up claim's labels,
    annotations (CDI's dropped, but its content type) and spec, at least the snapshot's restore size."""
    source = copy_json(backup.get("persistentVolumeClaim") or {})
    source_meta, source_spec = source.get("metadata") or {}, source.get("spec") or {}
    annotations = {
        k: v
        for k, v in (source_meta.get("annotations") or {}).items()
        if k == CONTENT_TYPE_ANNOTATION or not any(k.startswith(p) for p in DROPPED_ANNOTATION_PREFIXES)
    }
    reference = {
        "apiGroup": c.VOLUME_SNAPSHOT_GROUP,
        "kind": c.VOLUME_SNAPSHOT_KIND,
        "name": backup["volumeSnapshotName"],
    }
    resources = copy_json(source_spec.get("resources") or {})
    requests = resources.setdefault("requests", {})
    restore_size = (volume_snapshot.get("status") or {}).get("restoreSize")
    if restore_size is not None and (
        "storage" not in requests
        or parse_quantity(str(requests["storage"])).value < parse_quantity(str(restore_size)).value
    ):
        requests["storage"] = restore_size
    spec: dict[str, Any] = {"accessModes": source_spec.get("accessModes"), "resources": resources}
    for field in ("storageClassName", "volumeMode"):
        if source_spec.get(field) is not None:
            spec[field] = source_spec[field]
    spec["dataSource"] = dict(reference)
    spec["dataSourceRef"] = dict(reference)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(source_meta.get("labels") or {}),
            "annotations": annotations,
        },
        "spec": spec,
    }


def restore_claim(
    restore: Mapping[str, Any],
    name: str,
    backup: Mapping[str, Any],
    volume_snapshot: Mapping[str, Any],
    source_vm: Mapping[str, Any],
) -> dict[str, Any]:
    """The claim a volume is restored into (CreateRestorePVCDefFromVMRestore): a snapshot's claim that names its
    restore and source VM, without the backend-storage label."""
    claim = snapshot_claim(name, restore["metadata"]["namespace"], backup, volume_snapshot)
    labels, annotations = claim["metadata"]["labels"], claim["metadata"]["annotations"]
    labels.pop(BACKEND_PVC_LABEL, None)
    vm_meta = source_vm.get("metadata") or {}
    labels[SOURCE_NAME_LABEL] = str(vm_meta.get("name", ""))
    labels[SOURCE_NAMESPACE_LABEL] = str(vm_meta.get("namespace", ""))
    annotations[RESTORE_NAME_ANNOTATION] = restore["metadata"]["name"]
    annotations[LAST_RESTORE_ANNOTATION] = restore_marker(restore)
    for override in (restore.get("spec") or {}).get("volumeRestoreOverrides") or []:
        if override.get("volumeName") == backup.get("volumeName"):
            labels.update(override.get("labels") or {})
            annotations.update(override.get("annotations") or {})
    return claim


def owned_by_vm(backup: Mapping[str, Any], source_vm: Mapping[str, Any]) -> bool:
    """Whether the source claim belonged to the source VM (sourcePVCOwnedBySourceVM)."""
    meta = source_vm.get("metadata") or {}
    refs = (((backup.get("persistentVolumeClaim") or {}).get("metadata") or {}).get("ownerReferences")) or []
    return any(
        r.get("kind") == c.VM_KIND and r.get("name") == meta.get("name") and r.get("uid") == meta.get("uid")
        for r in refs
    )


def vm_owner_reference(vm: Mapping[str, Any]) -> dict[str, Any]:
    return controller_ref(dict(vm))


def template_index(name: str, vm: Mapping[str, Any]) -> int:
    for i, template in enumerate((vm.get("spec") or {}).get("dataVolumeTemplates") or []):
        if ((template.get("metadata") or {}).get("name")) == name:
            return i
    return -1


def data_volume_names(restore: Mapping[str, Any], snapshot_vm: Mapping[str, Any]) -> dict[str, str]:
    """Volume name → the DataVolume it is restored as, for the snapshot VM's volumes made from a template."""
    names = {}
    volumes = ((snapshot_vm.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
    recorded = {r.get("volumeName") for r in (restore.get("status") or {}).get("restores") or []}
    for volume in volumes:
        dv = (volume.get("dataVolume") or {}).get("name")
        if dv and volume.get("name") in recorded and template_index(str(dv), snapshot_vm) >= 0:
            names[str(volume["name"])] = restored_volume_name(restore, str(volume["name"]), str(dv))
    return names


def restored_vm(
    restore: Mapping[str, Any], snapshot_vm: Mapping[str, Any], target: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The target VM as the restore leaves it: the snapshot's spec on the restored claims, stopped."""
    spec = copy_json(snapshot_vm.get("spec") or {})
    templates = copy_json(spec.get("dataVolumeTemplates") or [])
    by_volume = {r.get("volumeName"): r for r in (restore.get("status") or {}).get("restores") or []}
    volumes = []
    for volume in ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []:
        volume = copy_json(volume)
        if volume.get("memoryDump") is not None:
            continue
        entry = by_volume.get(volume.get("name"))
        if entry is not None and volume.get("persistentVolumeClaim") is not None:
            volume["persistentVolumeClaim"]["claimName"] = entry["persistentVolumeClaim"]
        elif entry is not None and volume.get("dataVolume") is not None:
            index = template_index(str(volume["dataVolume"].get("name")), snapshot_vm)
            if index >= 0 and entry.get("dataVolumeName"):
                templates[index]["metadata"]["name"] = entry["dataVolumeName"]
                volume["dataVolume"]["name"] = entry["dataVolumeName"]
            else:
                volume = {
                    "name": volume["name"],
                    "persistentVolumeClaim": {"claimName": entry["persistentVolumeClaim"]},
                }
        volumes.append(volume)
    if target is None:
        snapshot_meta = snapshot_vm.get("metadata") or {}
        vm: dict[str, Any] = {
            "apiVersion": c.KUBEVIRT_API_VERSION,
            "kind": c.VM_KIND,
            "metadata": {
                "name": (restore.get("spec") or {}).get("target", {}).get("name"),
                "namespace": restore["metadata"]["namespace"],
                "labels": copy_json(snapshot_meta.get("labels") or {}),
                "annotations": copy_json(snapshot_meta.get("annotations") or {}),
            },
            "spec": spec,
        }
        if spec.get("running") is not None:
            spec["running"] = False
        else:
            spec["runStrategy"] = "Halted"
    else:
        vm = copy_json(dict(target))
        target_spec = target.get("spec") or {}
        if target_spec.get("running") is not None:
            spec["running"] = False
            spec.pop("runStrategy", None)
        else:
            spec["runStrategy"] = target_spec.get("runStrategy") or "Halted"
            spec.pop("running", None)
        vm["spec"] = spec
    if templates:
        spec["dataVolumeTemplates"] = templates
    else:
        spec.pop("dataVolumeTemplates", None)
    spec.setdefault("template", {}).setdefault("spec", {})["volumes"] = volumes
    vm["metadata"].setdefault("annotations", {})[LAST_RESTORE_ANNOTATION] = restore_marker(restore)
    if (snapshot_vm.get("metadata") or {}).get("name") == vm["metadata"]["name"]:
        firmware = spec["template"]["spec"].setdefault("domain", {}).setdefault("firmware", {})
        firmware.setdefault("uuid", legacy_firmware_uuid(str(vm["metadata"]["name"])))
    return vm


def deleted_data_volumes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """The target's DataVolume templates the restored VM no longer has (findDatavolumesForDeletion)."""
    kept = {(t.get("metadata") or {}).get("name") for t in (new.get("spec") or {}).get("dataVolumeTemplates") or []}
    return [
        str(name)
        for t in ((old or {}).get("spec") or {}).get("dataVolumeTemplates") or []
        if (name := (t.get("metadata") or {}).get("name")) not in kept
    ]
