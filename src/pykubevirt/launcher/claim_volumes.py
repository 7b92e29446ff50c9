"""The VMI's persistentVolumeClaim, dataVolume and hostDisk volumes as the domain will see them.

The node agent gives a filesystem claim at `<PRIVATE_DIR>/vmi-disks/<volume>` and a block claim at `/dev/<volume>`
(pod paths, mapped to host paths by PYKUBEVIRT_MOUNTS). The launcher links them under its short runtime directory,
where the converter's `pvc_disk_dir` and `block_device_dir` point, so the domain XML names one stable path per
volume: `vmi-disks/<volume>/disk.img` for files, `dev/<volume>` for block devices. `disk.img` is created sparse or
grown by pvc_disks (KubeVirt's virt-handler does this in the pod's mount namespace).
"""

from __future__ import annotations

import logging
import os
import posixpath
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api import pod_layout
from pykubevirt.launcher.pvc_disks import (
    DEFAULT_FILESYSTEM_OVERHEAD,
    DISK_IMG,
    PVCDiskError,
    prepare_host_disk,
    prepare_pvc_disk,
)

log = logging.getLogger("pykubevirt.launcher.claims")

PVC_DISK_DIR = f"{pod_layout.PRIVATE_DIR}/vmi-disks"


@dataclass(slots=True)
class ClaimVolumes:
    """Where the converter finds the claims, which are block devices, and what to tell about their sizes."""

    pvc_disk_dir: str
    block_device_dir: str
    block_volumes: set[str] = field(default_factory=set)
    read_only: set[str] = field(default_factory=set)
    ephemeral: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)


def _link(target: Path, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.is_symlink() and os.readlink(link) == str(target):
            return
        link.unlink()
    link.symlink_to(target)


def _claim_infos(vmi: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    statuses = (vmi.get("status") or {}).get("volumeStatus") or []
    return {str(s.get("name")): s.get("persistentVolumeClaimInfo") or {} for s in statuses}


def _overhead(info: Mapping[str, Any]) -> float:
    try:
        return float(info.get("filesystemOverhead") or DEFAULT_FILESYSTEM_OVERHEAD)
    except ValueError:
        return DEFAULT_FILESYSTEM_OVERHEAD


async def prepare_claim_volumes(vmi: Mapping[str, Any], host: Callable[[str], Path], runtime: Path) -> ClaimVolumes:
    """Link every claim and hostDisk into `runtime`, creating or growing disk images; PVCDiskError says why not."""
    prepared = ClaimVolumes(str(runtime / "vmi-disks"), str(runtime / "dev"))
    infos = _claim_infos(vmi)
    hotplugged = {
        s.get("name") for s in (vmi.get("status") or {}).get("volumeStatus") or [] if s.get("hotplugVolume") is not None
    }
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        name = str(volume["name"])
        claim = volume.get("persistentVolumeClaim") or volume.get("dataVolume") or {}
        if name in hotplugged or claim.get("hotpluggable"):
            continue  # mounted later, through virt-handler's hotplug command
        claim = volume.get("persistentVolumeClaim") or volume.get("dataVolume")
        if claim is not None:
            if claim.get("readOnly"):
                prepared.read_only.add(name)
            await _prepare_claim(prepared, name, infos.get(name) or {}, host, runtime)
        elif (ephemeral := volume.get("ephemeral")) is not None:
            # The claim is a read-only base under a local overlay the launcher writes (KubeVirt's ephemeral disk).
            directory = host(f"{PVC_DISK_DIR}/{name}")
            if not (directory / DISK_IMG).exists():
                claim_name = (ephemeral.get("persistentVolumeClaim") or {}).get("claimName")
                raise PVCDiskError(f"volume {name}: claim {claim_name} has no {DISK_IMG} to use as a base")
            _link(directory, runtime / "vmi-disks" / name)
            prepared.ephemeral.add(name)
        elif (host_disk := volume.get("hostDisk")) is not None:
            directory = host(f"{PVC_DISK_DIR}/{name}")
            _link(directory, runtime / "vmi-disks" / name)
            image = directory / posixpath.basename(str(host_disk.get("path") or ""))
            await prepare_host_disk(image, str(host_disk.get("type") or ""), host_disk.get("capacity"))
    return prepared


async def _prepare_claim(
    prepared: ClaimVolumes, name: str, info: Mapping[str, Any], host: Callable[[str], Path], runtime: Path
) -> None:
    device = host(f"/dev/{name}")
    if device != Path(f"/dev/{name}") or (device.exists() and stat.S_ISBLK(device.stat().st_mode)):
        if stat.S_ISBLK(device.stat().st_mode):
            _link(device, runtime / "dev" / name)
            prepared.block_volumes.add(name)
            return
        # A block claim backed by a sparse file (the embedded provisioner's): QEMU takes it as a raw file.
        _link(device, runtime / "vmi-disks" / name / DISK_IMG)
        return
    directory = host(f"{PVC_DISK_DIR}/{name}")
    if not directory.is_dir():
        raise PVCDiskError(f"volume {name}: the claim is not mounted at {PVC_DISK_DIR}/{name}")
    _link(directory, runtime / "vmi-disks" / name)
    image = directory / DISK_IMG
    if not info and image.exists():
        return  # no size known yet: an existing image is used as it is
    message = await prepare_pvc_disk(image, info, overhead=_overhead(info))
    if message:
        log.warning("volume %s: %s", name, message)
        prepared.messages.append(message)
