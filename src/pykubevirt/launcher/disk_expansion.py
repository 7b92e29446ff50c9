"""Online disk expansion: a claim of the running guest that grew is resized under the guest, which sees it at once.

KubeVirt's SyncVMI (`pkg/virt-launcher/virtwrap/manager.go` shouldExpandOnline, possibleGuestSize; ExpandDisks is
GA): for every disk of the domain whose claim's capacity, less the filesystem overhead and aligned down to 1 MiB,
exceeds what libvirt reports as the disk's capacity, `virDomainBlockResize` in bytes. For a raw image QEMU grows
the file itself (sparse) and the guest's virtio disk reports the new size; a block claim has no overhead.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import libvirt

from pykubevirt.api.volume_binding import to_bytes
from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.pvc_disks import DEFAULT_FILESYSTEM_OVERHEAD, possible_guest_size

log = logging.getLogger("pykubevirt.launcher.expansion")

ALIAS_PREFIX = "ua-"


@dataclass(frozen=True, slots=True)
class Growth:
    """One disk to grow: its volume, the path libvirt knows it by, and the size the guest may now have."""

    volume: str
    source: str
    size: int


def _overhead(info: Mapping[str, Any]) -> float:
    if info.get("volumeMode") == "Block":
        return 0.0  # CDI's and KubeVirt's overhead of a block claim
    try:
        return float(info.get("filesystemOverhead") or DEFAULT_FILESYSTEM_OVERHEAD)
    except ValueError:
        return DEFAULT_FILESYSTEM_OVERHEAD


def wanted_sizes(vmi: Mapping[str, Any], domain_xml: str) -> list[Growth]:
    """Every writable claim disk of the domain with the size its claim's capacity allows (unchecked against now)."""
    infos = {
        str(s.get("name")): s.get("persistentVolumeClaimInfo") or {}
        for s in (vmi.get("status") or {}).get("volumeStatus") or []
    }
    found = []
    for disk in ET.fromstring(domain_xml).iterfind("devices/disk") if domain_xml else ():
        alias, source = disk.find("alias"), disk.find("source")
        if alias is None or source is None or disk.find("readonly") is not None or disk.get("device") != "disk":
            continue
        name = (alias.get("name") or "").removeprefix(ALIAS_PREFIX)
        info = infos.get(name)
        path = source.get("file") or source.get("dev") or ""
        capacity = to_bytes((info or {}).get("capacity", {}).get("storage")) if info else 0
        if not path or not capacity or disk.find("backingStore/source") is not None:
            continue  # no claim, no known capacity, or an overlay (an ephemeral claim's base stays as it is)
        size = possible_guest_size(capacity, _overhead(info or {}))
        if size > 0:
            found.append(Growth(name, path, size))
    return found


async def expand_disks(domain: DomainManager, vmi: Mapping[str, Any]) -> list[str]:
    """Grow the running domain's claim disks to what their claims now allow; returns why any could not grow."""
    errors = []
    for growth in wanted_sizes(vmi, await domain.xml()):
        try:
            current = await domain.block_capacity(growth.source)
            if current is None or growth.size <= current:
                continue
            log.info("expanding volume %s from %d to %d bytes", growth.volume, current, growth.size)
            await domain.block_resize(growth.source, growth.size)
        except libvirt.libvirtError as exc:
            # KubeVirt logs it and carries on: the other disks and the rest of the sync still happen.
            log.warning("libvirt failed to expand volume %s: %s", growth.volume, exc)
            errors.append(f"expanding volume {growth.volume} failed: {exc}")
    return errors
