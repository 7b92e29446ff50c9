"""A VMI's `status.volumeStatus`: one entry per volume, claims with what is known of them (KubeVirt's
`pkg/virt-controller/watch/vmi/volume-status.go` updateVolumeStatus and `pkg/storage/types/pvc.go`). Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pykubevirt.api.json_copy import copy_json

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
    if (dump := volume.get("memoryDump")) is not None:
        return str(dump.get("claimName") or "")
    return ""


# The index of VMs and of VMIs by the claims they name (`namespace/claim`), which virt-controller's caches keep.
CLAIMS_INDEX = "claims"


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


HOTPLUGGABLE_SOURCES = ("dataVolume", "persistentVolumeClaim", "memoryDump")


def is_hotplug_volume(volume: Mapping[str, Any]) -> bool:
    """A dataVolume, persistentVolumeClaim or memoryDump volume marked hotpluggable (storagetypes.IsHotplugVolume)."""
    return any(bool((volume.get(key) or {}).get("hotpluggable")) for key in HOTPLUGGABLE_SOURCES)


def without_hotplug_volumes(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A VMI spec without its hotpluggable volumes and their disks: what a restart would be needed to change.

    Hotplugged volumes are applied to the running VMI as they are added to or removed from the VM, so a VM whose
    template differs from its VMI's only in those does not need a restart (KubeVirt's RestartRequired ignores them).
    """
    volumes = [v for v in spec.get("volumes") or [] if not is_hotplug_volume(v)]
    hotplugged = {v.get("name") for v in spec.get("volumes") or [] if is_hotplug_volume(v)}
    if not hotplugged:
        return dict(spec)
    result = copy_json(dict(spec))
    result["volumes"] = copy_json(volumes)
    devices = (result.get("domain") or {}).get("devices")
    if isinstance(devices, dict) and devices.get("disks") is not None:
        devices["disks"] = [d for d in devices["disks"] if d.get("name") not in hotplugged]
    return result


# Phases virt-handler owns once it has reached them; the controller leaves them alone.
HANDLER_HOTPLUG_PHASES = (
    "MountedToPod",
    "Ready",
    "Detaching",
    "UnMountedFromPod",
    "MemoryDumpInProgress",
    "MemoryDumpCompleted",
    "MemoryDumpFailed",
)


def hotplug_entry(entry: Mapping[str, Any], claim: str, pvc: Mapping[str, Any] | None, node: str) -> dict[str, Any]:
    """processHotplugVolumeStatus: Pending or Bound from the claim, AttachedToNode once its volume can be reached.

    There is no attachment pod here: a bound claim of a VMI placed on a node is reachable by that node's
    virt-handler, which mounts it into the launcher (so attachPodName/attachPodUID stay empty).
    """
    result = dict(entry)
    result.setdefault("hotplugVolume", {})
    if result.get("phase") in HANDLER_HOTPLUG_PHASES:
        return result
    phase = ((pvc or {}).get("status") or {}).get("phase")
    if pvc is None:
        result.update(phase="Pending", reason="FailedPvcNotFound", message=f"PVC {claim} not found")
    elif phase == "Bound" and node:
        result.update(
            phase="AttachedToNode",
            reason="AttachedToNode",
            message=f"Volume {entry.get('name')} of PVC {claim} is reachable on node {node}",
        )
    elif phase == "Bound":
        result.update(phase="Bound", reason="PVCNotReady", message="PVC is in phase Bound")
    elif phase == "Lost":
        result.update(phase="Pending", reason="PVCNotReady", message="PVC is in phase Lost")
    else:
        result.update(phase="Pending", reason="PVCNotReady", message="PVC is in phase ClaimPending")
    return result


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
        if volume.get("memoryDump") is not None and entry.get("memoryDumpVolume") is None:
            entry["memoryDumpVolume"] = {"claimName": name}
        if pvc is not None:
            entry["persistentVolumeClaimInfo"] = claim_info(pvc)
        if is_hotplug_volume(volume) or entry.get("hotplugVolume") is not None:
            entry = hotplug_entry(entry, claim, pvc, str((vmi.get("status") or {}).get("nodeName") or ""))
        result.append(entry)
    # Hotplugged volumes leave the spec before their status entry goes; virt-handler removes those.
    names = {entry["name"] for entry in result}
    result += [dict(s) for name, s in existing.items() if name not in names and s.get("hotplugVolume") is not None]
    return sorted(result, key=lambda entry: str(entry["name"]))


DATA_VOLUMES_READY = "DataVolumesReady"


def data_volume_names(vmi: Mapping[str, Any]) -> list[str]:
    return [
        str(v["dataVolume"].get("name") or "")
        for v in (vmi.get("spec") or {}).get("volumes") or []
        if v.get("dataVolume") is not None
    ]


def _ready_status(dv: Mapping[str, Any] | None) -> str:
    if dv is None:
        return "Unknown"
    for condition in (dv.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    return "Unknown"


def data_volumes_ready(vmi: Mapping[str, Any], data_volumes: Lookup, now: str) -> dict[str, Any] | None:
    """The VMI's DataVolumesReady condition (only for a VMI with DataVolumes; KubeVirt's vmi/datavolumes.go)."""
    names = data_volume_names(vmi)
    if not names:
        return None
    namespace = str((vmi.get("metadata") or {}).get("namespace") or "")
    states = [_ready_status(data_volumes(f"{namespace}/{name}")) for name in names]
    if all(state == "True" for state in states):
        status, reason, message = "True", "AllDVsReady", "All of the VMI's DVs are bound and ready"
    else:
        status = "False" if "False" in states else "Unknown"
        reason, message = "NotAllDVsReady", "Not all of the VMI's DVs are ready"
    previous: Mapping[str, Any] = next(
        (c for c in (vmi.get("status") or {}).get("conditions") or [] if c.get("type") == DATA_VOLUMES_READY), {}
    )
    transition = previous.get("lastTransitionTime") if previous.get("status") == status else now
    return {
        "type": DATA_VOLUMES_READY,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": transition,
    }


def data_volumes_pending(vmi: Mapping[str, Any], data_volumes: Lookup) -> list[str]:
    """DataVolumes the launcher pod must wait for: not Succeeded, PendingPopulation or WaitForFirstConsumer."""
    namespace = str((vmi.get("metadata") or {}).get("namespace") or "")
    waiting = []
    for name in data_volume_names(vmi):
        dv = data_volumes(f"{namespace}/{name}")
        phase = (dv.get("status") or {}).get("phase") if dv is not None else None
        if dv is not None and phase not in ("Succeeded", "PendingPopulation", "WaitForFirstConsumer"):
            waiting.append(name)
    return waiting
