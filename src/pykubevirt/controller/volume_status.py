"""A VMI's `status.volumeStatus`: one entry per volume, claims with what is known of them (KubeVirt's
`pkg/virt-controller/watch/vmi/volume-status.go` updateVolumeStatus and `pkg/storage/types/pvc.go`). Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# KubeVirt's filesystem overhead when CDI does not give one (pkg/storage/types/cdi.go DefaultFSOverhead).
DEFAULT_FS_OVERHEAD = "0.055"

Lookup = Callable[[str], Mapping[str, Any] | None]


def claim_name(volume: Mapping[str, Any]) -> str:
    """The claim a persistentVolumeClaim, dataVolume (its PVC has the DV's name) or ephemeral volume uses."""
    if (pvc := volume.get("persistentVolumeClaim")) is not None:
        return str(pvc.get("claimName") or "")
    if (dv := volume.get("dataVolume")) is not None:
        return str(dv.get("name") or "")
    if (ephemeral := volume.get("ephemeral")) is not None:
        return str((ephemeral.get("persistentVolumeClaim") or {}).get("claimName") or "")
    return ""


def claim_names(vmi: Mapping[str, Any]) -> list[str]:
    return [name for v in (vmi.get("spec") or {}).get("volumes") or [] if (name := claim_name(v))]


def claim_info(pvc: Mapping[str, Any]) -> dict[str, Any]:
    """persistentVolumeClaimInfo: modes, volume mode, capacity and requests of the claim."""
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    info: dict[str, Any] = {
        "claimName": (pvc.get("metadata") or {}).get("name"),
        "accessModes": list(status.get("accessModes") or spec.get("accessModes") or []),
        "volumeMode": spec.get("volumeMode") or "Filesystem",
        "capacity": dict(status.get("capacity") or {}),
        "requests": dict((spec.get("resources") or {}).get("requests") or {}),
        "filesystemOverhead": DEFAULT_FS_OVERHEAD,
    }
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    if any("/storage.preallocation" in key and value == "true" for key, value in annotations.items()):
        info["preallocated"] = True
    return {key: value for key, value in info.items() if value not in ({}, None)}


def volume_statuses(vmi: Mapping[str, Any], claims: Lookup) -> list[dict[str, Any]]:
    """Every volume's entry, sorted by name: kept fields from virt-handler (target, hotplug), claims' info refreshed."""
    namespace = str((vmi.get("metadata") or {}).get("namespace") or "")
    existing = {str(s.get("name")): s for s in (vmi.get("status") or {}).get("volumeStatus") or []}
    result = []
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        name = str(volume.get("name"))
        entry = dict(existing.get(name) or {"name": name, "target": ""})
        claim = claim_name(volume)
        pvc = claims(f"{namespace}/{claim}") if claim else None
        if pvc is not None:
            entry["persistentVolumeClaimInfo"] = claim_info(pvc)
        result.append(entry)
    # Hotplugged volumes leave the spec before their status entry goes; virt-handler removes those.
    names = {entry["name"] for entry in result}
    result += [dict(s) for name, s in existing.items() if name not in names and s.get("hotplugVolume")]
    return sorted(result, key=lambda entry: str(entry["name"]))
