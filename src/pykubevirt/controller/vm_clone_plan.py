"""What a VirtualMachineClone makes: its temporary snapshot and restore, and the patches that make the copy its own.

Pure functions over plain objects, after KubeVirt's `pkg/virt-controller/watch/clone/util.go` and `vm-target.go`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pykubevirt.admission.defaults.clone_mutator import random_target_suffix
from pykubevirt.api import constants as c
from pykubevirt.api.json_patch import escape

SOURCE_VM, SOURCE_SNAPSHOT = c.VM_KIND, c.VM_SNAPSHOT_KIND
PHASE_UNSET, SNAPSHOT_IN_PROGRESS, RESTORE_IN_PROGRESS = "", "SnapshotInProgress", "RestoreInProgress"
CREATING_TARGET_VM, SUCCEEDED, FAILED = "CreatingTargetVM", "Succeeded", "Failed"
LAST_RESTORE_ANNOTATION = "restore.kubevirt.io/lastRestoreUID"
VOLUME_NOT_SNAPSHOTABLE = "Virtual Machine volume {} does not support snapshots"
VOLUME_SNAPSHOT_SUPPORT_UNKNOWN = "Virtual Machine volume {} snapshot support unknown"
VOLUME_NOT_BACKED_UP = "volume {} is not backed up in snapshot {}"


def snapshot_name(clone: Mapping[str, Any]) -> str:
    return f"tmp-snapshot-{clone['metadata'].get('uid', '')}"


def restore_name(clone: Mapping[str, Any]) -> str:
    return f"tmp-restore-{clone['metadata'].get('uid', '')}"


def generated_vm_name(source_vm: str) -> str:
    """`<source>-clone-<5 random>` (generateNameWithRandomSuffix), for a clone whose target is still unnamed (the
    mutating webhook names it first wherever it runs)."""
    base = f"{source_vm}-clone"
    if len(base) > 252:
        base = "clone-object"
    return f"{base}-{random_target_suffix()}"


def owner_reference(clone: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": c.CLONE_API_VERSION,
        "kind": c.VM_CLONE_KIND,
        "name": clone["metadata"]["name"],
        "uid": clone["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def snapshot_of(clone: Mapping[str, Any], vm: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": c.SNAPSHOT_API_VERSION,
        "kind": c.VM_SNAPSHOT_KIND,
        "metadata": {
            "name": snapshot_name(clone),
            "namespace": vm["metadata"]["namespace"],
            "ownerReferences": [owner_reference(clone)],
        },
        "spec": {"source": {"apiGroup": c.KUBEVIRT_GROUP, "kind": c.VM_KIND, "name": vm["metadata"]["name"]}},
    }


def restore_of(clone: Mapping[str, Any], source_vm_name: str, snapshot: str, patches: list[str]) -> dict[str, Any]:
    spec = clone.get("spec") or {}
    target = dict(spec.get("target") or {"apiGroup": c.KUBEVIRT_GROUP, "kind": c.VM_KIND})
    if not target.get("name"):
        target["name"] = generated_vm_name(source_vm_name)
    restore_spec: dict[str, Any] = {"target": target, "virtualMachineSnapshotName": snapshot, "patches": patches}
    if spec.get("volumeNamePolicy"):
        # The clone's VolumeNamePolicy names the restore's VolumeRestorePolicy (ToVolumeRestorePolicy).
        restore_spec["volumeRestorePolicy"] = spec["volumeNamePolicy"]
    return {
        "apiVersion": c.SNAPSHOT_API_VERSION,
        "kind": c.VM_RESTORE_KIND,
        "metadata": {
            "name": restore_name(clone),
            "namespace": clone["metadata"]["namespace"],
            "ownerReferences": [owner_reference(clone)],
        },
        "spec": restore_spec,
    }


def volume_snapshot_problems(vm: Mapping[str, Any]) -> list[str]:
    """Why the VM's claims cannot all be snapshotted, from its volumeSnapshotStatuses (validateVolumeSnapshotStatus)."""
    statuses = {s.get("name"): s for s in (vm.get("status") or {}).get("volumeSnapshotStatuses") or []}
    problems = []
    for volume in _volumes(vm):
        if volume.get("persistentVolumeClaim") is None and volume.get("dataVolume") is None:
            continue
        found = statuses.get(volume.get("name"))
        if found is None:
            problems.append(VOLUME_SNAPSHOT_SUPPORT_UNKNOWN.format(volume.get("name")))
        elif not found.get("enabled"):
            problems.append(VOLUME_NOT_SNAPSHOTABLE.format(volume.get("name")))
    return problems


def volumes_not_backed_up(content: Mapping[str, Any]) -> list[str]:
    """The snapshot VM's claims its content holds no backup of (verifySnapshotContent)."""
    spec = content.get("spec") or {}
    vm = (spec.get("source") or {}).get("virtualMachine") or {}
    backed_up = {b.get("volumeName") for b in spec.get("volumeBackups") or []}
    return [
        VOLUME_NOT_BACKED_UP.format(v.get("name"), spec.get("virtualMachineSnapshotName"))
        for v in _volumes(vm)
        if (v.get("persistentVolumeClaim") is not None or v.get("dataVolume") is not None)
        and v.get("name") not in backed_up
    ]


def _volumes(vm: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((((vm.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or [])


def clone_patches(source: Mapping[str, Any], clone_spec: Mapping[str, Any]) -> list[str]:
    """The restore's patches that make the copy a VM of its own (generatePatches), then the clone's own."""
    ops: list[dict[str, Any]] = []
    template = (source.get("spec") or {}).get("template") or {}
    domain = (template.get("spec") or {}).get("domain") or {}
    new_macs = clone_spec.get("newMacAddresses") or {}
    for index, iface in enumerate((domain.get("devices") or {}).get("interfaces") or []):
        path = f"/spec/template/spec/domain/devices/interfaces/{index}/macAddress"
        ops.append({"op": "replace", "path": path, "value": new_macs.get(iface.get("name"), "")})
    firmware = domain.get("firmware")
    if firmware is not None:
        serial = clone_spec.get("newSMBiosSerial") or ""
        ops.append({"op": "replace", "path": "/spec/template/spec/domain/firmware/serial", "value": serial})
    meta = source.get("metadata") or {}
    ops += _removals(meta.get("labels") or {}, clone_spec.get("labelFilters"), "/metadata/labels")
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_RESTORE_ANNOTATION}
    ops += _removals(annotations, clone_spec.get("annotationFilters"), "/metadata/annotations")
    template_meta = template.get("metadata") or {}
    template_filters = clone_spec.get("template") or {}
    ops += _removals(
        template_meta.get("labels") or {}, template_filters.get("labelFilters"), "/spec/template/metadata/labels"
    )
    ops += _removals(
        template_meta.get("annotations") or {},
        template_filters.get("annotationFilters"),
        "/spec/template/metadata/annotations",
    )
    if firmware is not None:
        ops.append({"op": "replace", "path": "/spec/template/spec/domain/firmware/uuid", "value": ""})
    # Go's json.Marshal of a patch operation: op, path, value in that order, no spaces.
    return [json.dumps(op, separators=(",", ":")) for op in ops] + list(clone_spec.get("patches") or [])


def _removals(keys: Mapping[str, str], filters: Sequence[str] | None, base: str) -> list[dict[str, Any]]:
    """`remove` for every key the filters do not keep: `*` keeps all, `!x` drops what `x` matches (regexes)."""
    if filters is None:
        return []
    keep = [".*" if f == "*" else f for f in filters if not f.startswith("!")]
    drop = [f[1:] for f in filters if f.startswith("!")]
    kept = {k for k in keys if any(_matches(f, k) for f in keep) and not any(_matches(f, k) for f in drop)}
    return [{"op": "remove", "path": f"{base}/{escape(k)}"} for k in keys if k not in kept]


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False
