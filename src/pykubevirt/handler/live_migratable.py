"""The VMI's `LiveMigratable` condition and `migrationMethod`, as virt-handler computes them. Pure.

Upstream: pkg/virt-handler/vm.go (calculateLiveMigrationCondition, checkVolumesForMigration) and
pkg/network/vmispec/interface.go. The first failing check wins; a migratable VMI gets `True` without a reason.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import backend_storage as bs

ALLOW_POD_BRIDGE_ANNOTATION = "kubevirt.io/allow-pod-bridge-network-live-migration"
INTERFACE_MESSAGE = (
    "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network"
)
SHARED = "ReadWriteMany"


def _claims(vmi: dict[str, Any]) -> dict[str, list[str] | None]:
    """Claim volume name → its access modes from volumeStatus (None when not known yet)."""
    known = {
        str(s.get("name")): list((s.get("persistentVolumeClaimInfo") or {}).get("accessModes") or [])
        for s in (vmi.get("status") or {}).get("volumeStatus") or []
        if s.get("persistentVolumeClaimInfo")
    }
    found: dict[str, list[str] | None] = {}
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        if "persistentVolumeClaim" in volume or "dataVolume" in volume:
            found[str(volume["name"])] = known.get(str(volume["name"]))
    return found


def _claim_name(vmi: dict[str, Any], volume_name: str) -> str:
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == volume_name:
            source = volume.get("persistentVolumeClaim") or volume.get("dataVolume") or {}
            return str(source.get("claimName") or source.get("name") or volume_name)
    return volume_name


def _interface_problem(vmi: dict[str, Any]) -> str:
    spec = vmi.get("spec") or {}
    pod_networks = {n.get("name") for n in spec.get("networks") or [] if "pod" in n}
    annotations = (vmi.get("metadata") or {}).get("annotations") or {}
    for iface in ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []:
        if iface.get("name") not in pod_networks:
            continue
        if "masquerade" in iface or "passt" in iface or "binding" in iface:
            continue
        if "bridge" in iface and ALLOW_POD_BRIDGE_ANNOTATION in annotations:
            continue
        return INTERFACE_MESSAGE
    return ""


def live_migratable(vmi: dict[str, Any], now: str) -> dict[str, Any]:
    """The LiveMigratable condition of `vmi`."""
    message = _interface_problem(vmi)
    reason = "InterfaceNotLiveMigratable" if message else ""
    if not reason and bs.claim_not_shared(vmi):
        # Persistent EFI/TPM state on a claim the target pod could not mount too (KubeVirt 1.3's check; see
        # api/backend_storage.NOT_SHARED_MESSAGE).
        reason, message = "DisksNotLiveMigratable", bs.NOT_SHARED_MESSAGE
    if not reason:
        for volume in (vmi.get("spec") or {}).get("volumes") or []:
            if "hostDisk" in volume:
                reason, message = "DisksNotLiveMigratable", "cannot migrate VMI with non-shared HostDisk"
                break
    if not reason:
        for name, modes in _claims(vmi).items():
            claim = _claim_name(vmi, name)
            if modes is None:
                reason = "DisksNotLiveMigratable"
                message = (
                    f"cannot migrate VMI: Unable to determine if PVC {claim} is shared, live migration requires "
                    "that all PVCs must be shared (using ReadWriteMany access mode)"
                )
                break
            if SHARED not in modes:
                reason = "DisksNotLiveMigratable"
                message = (
                    f"cannot migrate VMI: PVC {claim} is not shared, live migration requires that all PVCs must be "
                    "shared (using ReadWriteMany access mode)"
                )
                break
    condition: dict[str, Any] = {"type": "LiveMigratable", "status": "False" if reason else "True"}
    if reason:
        condition.update(reason=reason, message=message)
    condition["lastTransitionTime"] = now
    return condition


def migration_method(vmi: dict[str, Any]) -> str:
    """BlockMigration when some disk must be copied (not a shared claim, not a read-only CD-ROM), else LiveMigration."""
    cdroms = {
        d.get("name")
        for d in (((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}).get("disks") or []
        if "cdrom" in d and (d.get("cdrom") or {}).get("readonly", True)
    }
    claims = _claims(vmi)
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        name = volume.get("name")
        if name in claims:
            if SHARED not in (claims[name] or []):
                return "BlockMigration"
        elif (volume.get("hostDisk") or {}).get("shared"):
            continue  # on storage both nodes see (KubeVirt's checkVolumesForMigration)
        elif name not in cdroms:
            return "BlockMigration"
    return "LiveMigration"


def migratability_changes(vmi: dict[str, Any], conditions: list[dict[str, Any]] | None, now: str) -> dict[str, Any]:
    """The status fields to change so LiveMigratable and migrationMethod say what `vmi` is now."""
    status = vmi.get("status") or {}
    current = list(conditions if conditions is not None else status.get("conditions") or [])
    wanted = live_migratable(vmi, now)
    existing = next((x for x in current if x.get("type") == "LiveMigratable"), None)
    changes: dict[str, Any] = {}
    same = existing is not None and all(existing.get(k) == wanted.get(k) for k in ("status", "reason", "message"))
    if not same:
        changes["conditions"] = [*(x for x in current if x.get("type") != "LiveMigratable"), wanted]
    elif conditions is not None:
        changes["conditions"] = current
    method = migration_method(vmi)
    if status.get("migrationMethod") != method:
        changes["migrationMethod"] = method
    return changes


def shared_volumes(vmi: dict[str, Any]) -> list[str]:
    """Volumes a migration leaves in place: claims (KubeVirt migrates only ReadWriteMany ones) and shared hostDisks.

    KubeVirt's classifyVolumesForMigration; the source launcher copies none of them."""
    shared = []
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        host_disk = volume.get("hostDisk")
        if "persistentVolumeClaim" in volume or "dataVolume" in volume or (host_disk and host_disk.get("shared")):
            shared.append(str(volume["name"]))
    return shared
