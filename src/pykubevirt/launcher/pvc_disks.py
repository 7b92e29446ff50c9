"""`disk.img` on filesystem PVCs and hostDisks: created sparse when missing, grown when the claim grew.

KubeVirt: `pkg/host-disk/host-disk.go` (the capacity a PVC gives its hostDisk, DiskImgCreator with its free-space
reserve and toleration) and `pkg/virt-launcher/virtwrap/manager.go` (possibleGuestSize, offline expansion).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pykubevirt.api.quantity import MI
from pykubevirt.api.volume_binding import to_bytes

DISK_IMG = "disk.img"
# virt-config defaults: bytes kept free on the volume, and how much smaller than asked a PV may be (percent).
MINIMUM_RESERVE_PVC_BYTES = 131072
LESS_PVC_SPACE_TOLERATION = 10
# KubeVirt's filesystem overhead of a PVC when CDI does not say (pkg/storage/types/cdi.go).
DEFAULT_FILESYSTEM_OVERHEAD = 0.055
QEMU_UID = 107


class PVCDiskError(Exception):
    """disk.img cannot be created; the message is KubeVirt's."""


def align_down_1mib(size: int) -> int:
    return size - size % MI


def claim_disk_capacity(name: str, capacity: Mapping[str, Any] | None, requests: Mapping[str, Any] | None) -> int:
    """The hostDisk capacity a PVC gives: the request if the capacity is unknown or larger, else the capacity."""
    request = to_bytes((requests or {}).get("storage"))
    actual = to_bytes((capacity or {}).get("storage"))
    if not request and not actual:
        raise PVCDiskError(
            "unable to determine capacity of HostDisk from PVC that provides no storage capacity or requests"
        )
    size = align_down_1mib(request if not actual or (request and actual > request) else actual)
    if size < MI:
        raise PVCDiskError(f"the size for volume {name} is too low, must be at least 1MiB")
    return size


def creation_size(
    path: Path, capacity: int, available: int, toleration: int = LESS_PVC_SPACE_TOLERATION
) -> tuple[int, str]:
    """The size to create (and a ToleratedSmallPV message when smaller than asked) from the space available."""
    if capacity <= available:
        return capacity, ""
    if capacity * (100 - toleration) // 100 > available:
        raise PVCDiskError(
            f"unable to create {path}, not enough space, demanded size {capacity} B is bigger than available space "
            f"{available} B, also after taking {toleration} % toleration into account"
        )
    return available, (
        f"PV size too small: expected {capacity} B, found {available} B. Using it anyway, it is within {toleration} % "
        "toleration"
    )


def possible_guest_size(capacity: int, overhead: float) -> int:
    """possibleGuestSize: what of a claim's capacity the guest may use once the filesystem's overhead is taken."""
    return align_down_1mib(int((1 - overhead) * capacity))


def _available(directory: Path, reserve: int) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize - reserve


def _create_sparse(path: Path, size: int) -> None:
    # touch 0666, then one zero byte at size-1: sparse, as DiskImgCreator writes it.
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o666)
    try:
        os.pwrite(fd, b"\0", size - 1)
    finally:
        os.close(fd)
    if os.geteuid() == 0:
        os.chown(path, QEMU_UID, QEMU_UID)


def _prepare(path: Path, capacity: int, overhead: float, reserve: int) -> str:
    if not path.exists():
        size, tolerated = creation_size(path, capacity, _available(path.parent, reserve))
        _create_sparse(path, size)
        return tolerated
    wanted = possible_guest_size(capacity, overhead) if overhead else capacity
    if wanted > path.stat().st_size:
        os.truncate(path, wanted)  # a raw image grows by growing the file; the new end stays sparse
    return ""


async def prepare_pvc_disk(
    path: Path,
    claim_info: Mapping[str, Any],
    *,
    overhead: float = DEFAULT_FILESYSTEM_OVERHEAD,
    reserve: int = MINIMUM_RESERVE_PVC_BYTES,
) -> str:
    """Create `path` sparse when missing, grow it when the claim's capacity grew; returns a ToleratedSmallPV message.

    `claim_info` is a VMI volumeStatus persistentVolumeClaimInfo (`capacity`, `requests`) or a PVC.
    """
    capacity = claim_info.get("capacity") or (claim_info.get("status") or {}).get("capacity")
    requests = claim_info.get("requests") or ((claim_info.get("spec") or {}).get("resources") or {}).get("requests")
    size = claim_disk_capacity(path.parent.name, capacity, requests)
    try:
        return await asyncio.to_thread(_prepare, path, size, overhead, reserve)
    except OSError as exc:
        raise PVCDiskError(f"preparing host-disks failed: {exc}") from exc


async def prepare_host_disk(
    path: Path, disk_type: str, capacity: Any, *, reserve: int = MINIMUM_RESERVE_PVC_BYTES
) -> str:
    """A user hostDisk: `Disk` must exist; `DiskOrCreate` is created sparse with its capacity when missing."""
    if path.exists():
        return ""
    if disk_type != "DiskOrCreate":
        raise PVCDiskError(f"preparing host-disks failed: {path} does not exist")
    size = align_down_1mib(to_bytes(capacity))
    if size < MI:
        raise PVCDiskError(f"the size for volume {path.name} is too low, must be at least 1MiB")
    try:
        return await asyncio.to_thread(_prepare, path, size, 0.0, reserve)
    except OSError as exc:
        raise PVCDiskError(f"preparing host-disks failed: {exc}") from exc
