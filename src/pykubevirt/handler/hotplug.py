"""virt-handler's part of volume hotplug: mount claims into the launcher, follow the disks, report the phases.

KubeVirt (`pkg/virt-handler/vm.go` updateHotplugVolumeStatus, `pkg/virt-handler/hotplug-disk`): once the controller
says a volume is AttachedToNode, the handler mounts it into the launcher (MountedToPod), the launcher attaches it
(Ready, with its target). A volume that left the spec is detached (Detaching here, as the disk leaves the domain),
unmounted, and its entry dropped with a `VolumeUnplugged` event. Without attachment pods, the handler reaches the
claim's volume itself: the PV's hostPath or local path on this node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from pykubevirt.handler import memory_dump

log = logging.getLogger("pykubevirt.handler.hotplug")

MOUNTABLE_PHASES = ("AttachedToNode", "MountedToPod", "Ready")
# Phases where the disk may be in the domain: a volume leaving the spec in one of them is detached first.
ATTACHED_PHASES = ("MountedToPod", "Ready")


@dataclass(slots=True)
class StatusUpdate:
    """The new volumeStatus list and the (reason, message) events its changes make."""

    statuses: list[dict[str, Any]]
    events: list[tuple[str, str]] = field(default_factory=list)
    # Something is still on its way (a disk to attach or detach): look again soon.
    pending: bool = False


def hotplug_entries(vmi: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [s for s in (vmi.get("status") or {}).get("volumeStatus") or [] if s.get("hotplugVolume") is not None]


def _spec_volumes(vmi: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(v.get("name")): v for v in (vmi.get("spec") or {}).get("volumes") or []}


def _set(entry: dict[str, Any], phase: str, reason: str, message: str, events: list[tuple[str, str]]) -> None:
    if entry.get("phase") != phase:
        events.append((reason, message))
    entry.update(phase=phase, reason=reason, message=message)


def mark_detaching(vmi: Mapping[str, Any]) -> StatusUpdate | None:
    """Volumes gone from the spec whose disk may still be in the domain become Detaching; None when there are none."""
    in_spec = _spec_volumes(vmi)
    events: list[tuple[str, str]] = []
    statuses = []
    changed = False
    for status in (vmi.get("status") or {}).get("volumeStatus") or []:
        entry = dict(status)
        name = str(entry.get("name"))
        if entry.get("hotplugVolume") is not None and name not in in_spec and entry.get("phase") in ATTACHED_PHASES:
            _set(entry, "Detaching", "VolumeDetaching", f"Volume {name} is being detached from the VM", events)
            changed = True
        statuses.append(entry)
    return StatusUpdate(statuses, events, pending=True) if changed else None


def after_sync(vmi: Mapping[str, Any], mounted: set[str], attached: Mapping[str, str]) -> StatusUpdate:
    """The phases once the launcher has mounted `mounted` and the domain holds `attached` (volume → target)."""
    in_spec = _spec_volumes(vmi)
    events: list[tuple[str, str]] = []
    statuses: list[dict[str, Any]] = []
    pending = False
    for status in (vmi.get("status") or {}).get("volumeStatus") or []:
        entry = dict(status)
        name = str(entry.get("name"))
        if entry.get("hotplugVolume") is None:
            statuses.append(entry)
            continue
        if name in in_spec:
            if name in attached:
                entry["target"] = attached[name]
                _set(entry, "Ready", "VolumeReady", f"Successfully attach hotplugged volume {name} to VM", events)
            elif name in mounted and entry.get("phase") in ("Pending", "Bound", "AttachedToNode"):
                message = f"Volume {name} has been mounted in virt-launcher pod"
                _set(entry, "MountedToPod", "VolumeMountedToPod", message, events)
                pending = True
            elif entry.get("phase") in MOUNTABLE_PHASES:
                pending = True
            statuses.append(entry)
            continue
        if name in attached or name in mounted:
            pending = True
            statuses.append(entry)
            continue
        # Detached and unmounted: the entry goes (KubeVirt passes UnMountedFromPod on the way out).
        events.append(("VolumeUnplugged", f"Volume {name} has been unplugged"))
    return StatusUpdate(statuses, events, pending=pending)


def claim_name(volume: Mapping[str, Any]) -> str:
    """The claim of a hotpluggable volume (a DataVolume's PVC has its name)."""
    for kind in ("persistentVolumeClaim", "memoryDump"):
        if isinstance(volume.get(kind), Mapping):
            return str(volume[kind].get("claimName") or "")
    return str((volume.get("dataVolume") or {}).get("name") or "")


def wants_launcher(vmi: Mapping[str, Any]) -> bool:
    """Whether the launcher has hotplug work: an entry to mount or follow, or one leaving the spec."""
    return bool(hotplug_entries(vmi))


async def claim_mounts(client: KubeClient, vmi: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Host paths of the hotplugged claims that can be mounted (AttachedToNode or later, still in the spec), with
    the file a memory dump in progress is to go to."""
    namespace = str((vmi.get("metadata") or {}).get("namespace") or "")
    volumes = _spec_volumes(vmi)
    dumps = memory_dump.requested_files(vmi)
    mounts: dict[str, dict[str, Any]] = {}
    for entry in hotplug_entries(vmi):
        name = str(entry.get("name"))
        volume = volumes.get(name)
        if volume is None or entry.get("phase") not in (*MOUNTABLE_PHASES, *memory_dump.PHASES):
            continue
        try:
            path = await _volume_path(client, namespace, claim_name(volume))
        except (ApiError, OSError, LookupError) as exc:
            log.warning("hotplugged volume %s cannot be mounted yet: %s", name, exc)
            continue
        mounts[name] = {"path": path, "memoryDump": dumps[name]} if name in dumps else {"path": path}
    return mounts


async def _volume_path(client: KubeClient, namespace: str, claim: str) -> str:
    pvc = await client.get(PERSISTENT_VOLUME_CLAIMS, claim, namespace)
    volume_name = str((pvc.get("spec") or {}).get("volumeName") or "")
    if not volume_name or (pvc.get("status") or {}).get("phase") != "Bound":
        raise LookupError(f"PersistentVolumeClaim {namespace}/{claim} is not bound")
    pv = await client.get(PERSISTENT_VOLUMES, volume_name)
    spec = pv.get("spec") or {}
    source = spec.get("hostPath") or spec.get("local") or {}
    if not source.get("path"):
        raise LookupError(f"volume {volume_name} has no hostPath or local path on this node")
    return str(source["path"])
