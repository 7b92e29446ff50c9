"""What a VirtualMachineSnapshot and its content say about themselves: phase, conditions, indications, deadline.

Pure functions over plain objects, after KubeVirt's `pkg/storage/snapshot/snapshot.go` and `util.go`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pykubevirt.api.go_duration import parse_go_duration
from pykubevirt.api.timestamps import parse_time

SNAPSHOT_FINALIZER = "snapshot.kubevirt.io/vmsnapshot-protection"
CONTENT_FINALIZER = "snapshot.kubevirt.io/vmsnapshotcontent-protection"
SOURCE_FINALIZER = "snapshot.kubevirt.io/snapshot-source-protection"
SOURCE_NAME_LABEL = "snapshot.kubevirt.io/source-vm-name"
SOURCE_NAMESPACE_LABEL = "snapshot.kubevirt.io/source-vm-namespace"
DEFAULT_FAILURE_DEADLINE_SECONDS = 300.0
DEADLINE_EXCEEDED = "snapshot deadline exceeded"
LOCKED = "Source locked and operation in progress"
NOT_LOCKED = "Source not locked"

IN_PROGRESS, SUCCEEDED, FAILED, DELETING = "InProgress", "Succeeded", "Failed", "Deleting"
READY, PROGRESSING, FAILURE = "Ready", "Progressing", "Failure"

ONLINE, GUEST_AGENT, NO_GUEST_AGENT, PAUSED, PARTIAL = "Online", "GuestAgent", "NoGuestAgent", "Paused", "Partial"
QUIESCE_TIMEOUT = "QuiesceTimeout"
# What the guest agent answers a thaw when Windows VSS could not hold the freeze (its 10-second limit).
VSS_FREEZE_LIMIT = "fsfreeze is limited"
INDICATION_MESSAGES = {
    ONLINE: "Snapshot taken while the VM was running. Consistency depends on guest-agent quiescing.",
    GUEST_AGENT: "Guest agent was active and attempted to quiesce the filesystem for application consistency.",
    NO_GUEST_AGENT: "Guest agent was not available. Snapshot is crash-consistent and may not be "
    "application-consistent.",
    PAUSED: "Snapshot taken while the VM was paused. Snapshot is crash-consistent and may not be "
    "application-consistent.",
    QUIESCE_TIMEOUT: "Guest agent quiesced the filesystem, but the freeze window timed out before completion. "
    "Snapshot is crash-consistent and may not be application-consistent.",
    PARTIAL: "Not all snapshotable volumes were included in the snapshot. Check status.snapshotVolumes for excluded "
    "volumes and VM VolumeSnapshotStatus for details.",
}


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def content_name(snapshot: Mapping[str, Any]) -> str:
    """The content's name: the one in status once set, else `vmsnapshot-content-<uid>`."""
    named = _status(snapshot).get("virtualMachineSnapshotContentName")
    return str(named) if named else f"vmsnapshot-content-{snapshot['metadata'].get('uid', '')}"


def volume_snapshot_name(snapshot: Mapping[str, Any], volume: str) -> str:
    return f"vmsnapshot-{snapshot['metadata'].get('uid', '')}-volume-{volume}"


def ready(obj: Mapping[str, Any] | None) -> bool:
    return _status(obj).get("readyToUse") is True


def failed(snapshot: Mapping[str, Any]) -> bool:
    return _status(snapshot).get("phase") == FAILED


def succeeded(snapshot: Mapping[str, Any]) -> bool:
    return _status(snapshot).get("phase") == SUCCEEDED


def progressing(snapshot: Mapping[str, Any]) -> bool:
    return not failed(snapshot) and not succeeded(snapshot)


def deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj) and bool((obj or {}).get("metadata", {}).get("deletionTimestamp"))


def delete_content_policy(snapshot: Mapping[str, Any]) -> bool:
    return (snapshot.get("spec") or {}).get("deletionPolicy") in (None, "Delete")


def should_delete_content(snapshot: Mapping[str, Any], content: Mapping[str, Any]) -> bool:
    return delete_content_policy(snapshot) or not ready(content)


def failure_deadline(snapshot: Mapping[str, Any]) -> float:
    """Seconds a snapshot may take (spec.failureDeadline, 5m by default; 0 means no deadline)."""
    text = (snapshot.get("spec") or {}).get("failureDeadline")
    if text is None:
        return DEFAULT_FAILURE_DEADLINE_SECONDS
    try:
        return parse_go_duration(str(text))
    except ValueError:
        return DEFAULT_FAILURE_DEADLINE_SECONDS


def seconds_until_deadline(snapshot: Mapping[str, Any], now: datetime) -> float:
    """Seconds left before the deadline (negative once past); 0 when there is no deadline, as KubeVirt's."""
    limit = failure_deadline(snapshot)
    if limit == 0:
        return 0.0
    created = parse_time(snapshot["metadata"].get("creationTimestamp"))
    if created is None:
        return limit
    return limit - (now - created).total_seconds()


def deadline_exceeded(snapshot: Mapping[str, Any], now: datetime) -> bool:
    if failed(snapshot):
        return True
    if not progressing(snapshot):
        return False
    return seconds_until_deadline(snapshot, now) < 0


def terminating(snapshot: Mapping[str, Any], now: datetime) -> bool:
    return deleting(snapshot) or deadline_exceeded(snapshot, now)


def content_deleted_if_needed(snapshot: Mapping[str, Any], content: Mapping[str, Any] | None) -> bool:
    return content is None or not should_delete_content(snapshot, content)


def can_unlock_source(snapshot: Mapping[str, Any], content: Mapping[str, Any] | None, now: datetime) -> bool:
    """Done, or going (deleted or past its deadline) with its content gone where it should go."""
    return not progressing(snapshot) or (terminating(snapshot, now) and content_deleted_if_needed(snapshot, content))


def condition(type_: str, status: bool, reason: str, now: str) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": reason, "lastTransitionTime": now}


def update_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> None:
    """Replace the condition of the same type only when its status or reason changed (its time stays otherwise)."""
    for i, existing in enumerate(conditions):
        if existing.get("type") == new["type"]:
            if existing.get("status") != new["status"] or existing.get("reason") != new["reason"]:
                conditions[i] = new
            return
    conditions.append(new)


def source_indications(
    current: Sequence[str], *, online: bool, paused: bool, guest_agent: bool, error: str = ""
) -> tuple[list[str], list[dict[str, str]]]:
    """The `indications` and `sourceIndications` of a snapshot in progress (none for an offline source); `error` is the
    snapshot's error message, which says when the guest could not hold its filesystems frozen."""
    if not online:
        return [], []
    found = set(current) | {ONLINE}
    if paused:
        found.add(PAUSED)
    elif guest_agent:
        found.add(GUEST_AGENT)
        if VSS_FREEZE_LIMIT in error:
            found.add(QUIESCE_TIMEOUT)
    else:
        found.add(NO_GUEST_AGENT)
    ordered = sorted(found)
    return ordered, [{"indication": i, "message": INDICATION_MESSAGES.get(i, "Unknown indication")} for i in ordered]


def add_partial_indication(status: dict[str, Any]) -> None:
    sources = status.setdefault("sourceIndications", [])
    if not any(s.get("indication") == PARTIAL for s in sources):
        sources.append({"indication": PARTIAL, "message": INDICATION_MESSAGES[PARTIAL]})
    indications = status.setdefault("indications", [])
    if PARTIAL not in indications:
        indications.append(PARTIAL)


def content_volume_statuses(
    backups: Sequence[Mapping[str, Any]], volume_snapshots: Mapping[str, Mapping[str, Any] | None]
) -> list[dict[str, Any]]:
    """The content's `volumeSnapshotStatus`: each backup's VolumeSnapshot as it stands (those that exist)."""
    statuses = []
    for backup in backups:
        name = backup.get("volumeSnapshotName")
        found = volume_snapshots.get(str(name)) if name else None
        if found is None:
            continue
        entry: dict[str, Any] = {"volumeSnapshotName": name}
        status = _status(found)
        for field in ("readyToUse", "creationTime"):
            if status.get(field) is not None:
                entry[field] = status[field]
        error = status.get("error")
        if error:
            entry["error"] = {k: v for k, v in error.items() if k in ("message", "time")}
        statuses.append(entry)
    return statuses


def content_outcome(
    statuses: Sequence[Mapping[str, Any]], missing: Sequence[str], skipped: Sequence[str]
) -> tuple[bool, bool, str]:
    """Whether every VolumeSnapshot is created and ready, and the error to report (KubeVirt's texts)."""
    if missing:
        return False, False, f"VolumeSnapshots ({','.join(missing)}) missing"
    if skipped:
        return False, False, f"VolumeSnapshots ({','.join(skipped)}) skipped because vm snapshot is deleted"
    created = all(s.get("creationTime") is not None for s in statuses)
    is_ready = all(s.get("readyToUse") is True for s in statuses)
    for s in statuses:
        message = (s.get("error") or {}).get("message")
        if message:
            return created, is_ready, f"VolumeSnapshot {s['volumeSnapshotName']} error: {message}"
    return created, is_ready, ""
