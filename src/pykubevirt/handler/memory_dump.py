"""virt-handler's part of a memory dump (KubeVirt's updateMemoryDumpInfo and getMemoryDump). Pure.

A memoryDump volume mounted into the launcher becomes `MemoryDumpInProgress` with the file it is to get; the launcher
is then asked for that file with every hotplug sync, and what it reports of the dump makes the volume
`MemoryDumpCompleted` or `MemoryDumpFailed`, with the dump's start and end in `memoryDumpVolume`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pykubevirt.handler.hotplug import StatusUpdate

IN_PROGRESS = "MemoryDumpInProgress"
COMPLETED = "MemoryDumpCompleted"
FAILED = "MemoryDumpFailed"
PHASES = (IN_PROGRESS, COMPLETED, FAILED)


def target_file(vmi_name: str, volume: str, now: datetime) -> str:
    return f"{vmi_name}-{volume}-{now:%Y%m%d-%H%M%S}.memory.dump"


def requested_files(vmi: Mapping[str, Any]) -> dict[str, str]:
    """The memory dump volumes in progress and the file each is to get (what the launcher is asked to dump)."""
    found = {}
    for status in (vmi.get("status") or {}).get("volumeStatus") or []:
        dump = status.get("memoryDumpVolume")
        if isinstance(dump, Mapping) and status.get("phase") == IN_PROGRESS and dump.get("targetFileName"):
            found[str(status.get("name"))] = str(dump["targetFileName"])
    return found


def _move(entry: dict[str, Any], phase: str, reason: str, message: str, update: StatusUpdate) -> None:
    if entry.get("phase") != phase:
        update.events.append((reason, message))
    entry.update(phase=phase, reason=reason, message=message)


def follow(update: StatusUpdate, vmi_name: str, result: Mapping[str, Any] | None, now: datetime) -> None:
    """Move the memory dump volumes of `update` along, by what the launcher said of its last dump (`result`)."""
    for entry in update.statuses:
        dump = entry.get("memoryDumpVolume")
        if not isinstance(dump, Mapping):
            continue
        name = str(entry.get("name"))
        if entry.get("phase") == "MountedToPod":
            entry["memoryDumpVolume"] = {**dump, "targetFileName": target_file(vmi_name, name, now)}
            message = f"Memory dump Volume {name} is attached, getting memory dump"
            _move(entry, IN_PROGRESS, "VolumeMountedToPod", message, update)
            update.pending = True
            continue
        if entry.get("phase") != IN_PROGRESS:
            continue
        # Looked at again until the launcher reports this file's dump done.
        update.pending = True
        if result is None or result.get("fileName") != dump.get("targetFileName"):
            continue
        changed = dict(dump)
        if result.get("startTimestamp"):
            changed["startTimestamp"] = result["startTimestamp"]
        if result.get("endTimestamp") and result.get("failed"):
            changed["endTimestamp"] = result["endTimestamp"]
            message = f"Memory dump to pvc {name} failed: {result.get('failureReason', '')}"
            _move(entry, FAILED, str(entry.get("reason") or "VolumeMountedToPod"), message, update)
        elif result.get("completed"):
            changed["endTimestamp"] = result.get("endTimestamp")
            message = f"Memory dump to Volume {name} has completed successfully"
            _move(entry, COMPLETED, "VolumeReady", message, update)
        entry["memoryDumpVolume"] = changed
