"""Hotplugged volumes of the running guest: mounted into the launcher, then attached to and detached from the domain.

KubeVirt's virt-handler bind-mounts a hotplugged claim (reached through an attachment pod) into the launcher at
`/var/run/kubevirt/hotplug-disks/<volume>.img`, and the launcher attaches what is mounted. Here virt-handler hands the
claim's host path over the command socket and the launcher links it at `<runtime>/hotplug-disks/<volume>.img` (a
filesystem claim's `disk.img`, created sparse if missing as for any claim; a block claim's file or device). The
domain then gets the disk with `attachDeviceFlags(VIR_DOMAIN_AFFECT_LIVE)` and loses it with `detachDeviceFlags`.
A memory dump's claim is linked as a directory, into which the guest's memory is dumped (launcher/memory_dump.py).
"""

from __future__ import annotations

import logging
import os
import stat
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import libvirt

from pykubevirt.launcher import disks
from pykubevirt.launcher.converter import ConversionError, ConverterContext
from pykubevirt.launcher.converter.hotplug import LiveDisk, disk_xml, live_disk, plan
from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.memory_dump import MemoryDumper
from pykubevirt.launcher.pvc_disks import DEFAULT_FILESYSTEM_OVERHEAD, DISK_IMG, prepare_pvc_disk

log = logging.getLogger("pykubevirt.launcher.hotplug")

HOTPLUG_DIR = "hotplug-disks"


@dataclass(slots=True)
class HotplugResult:
    """Volumes linked into the launcher, and the hotplugged volumes in the domain with their target."""

    mounted: list[str] = field(default_factory=list)
    attached: dict[str, str] = field(default_factory=dict)
    # Why a volume could not be attached or detached; the others still proceed.
    errors: list[str] = field(default_factory=list)


def live_disks(domain_xml: str) -> list[LiveDisk]:
    """The volume disks of a domain XML."""
    if not domain_xml:
        return []
    found = []
    for disk in ET.fromstring(domain_xml).iterfind("devices/disk"):
        alias, target = disk.find("alias"), disk.find("target")
        source, address = disk.find("source"), disk.find("address")
        if alias is None or target is None:
            continue
        path = "" if source is None else source.get("file") or source.get("dev") or ""
        unit = address.get("unit") if address is not None and address.get("type") == "drive" else None
        entry = live_disk(alias.get("name") or "", target.get("dev") or "", target.get("bus") or "", unit, path)
        if entry is not None:
            found.append(entry)
    return found


def _disk_element(domain_xml: str, name: str) -> str:
    for disk in ET.fromstring(domain_xml).iterfind("devices/disk"):
        alias = disk.find("alias")
        if alias is not None and alias.get("name") == f"ua-{name}":
            return ET.tostring(disk, encoding="unicode")
    return ""


def _claim_info(vmi: dict[str, Any], name: str) -> dict[str, Any]:
    for status in (vmi.get("status") or {}).get("volumeStatus") or []:
        if status.get("name") == name:
            return dict(status.get("persistentVolumeClaimInfo") or {})
    return {}


def _memory_dump_volumes(vmi: dict[str, Any]) -> set[str]:
    return {str(v.get("name")) for v in (vmi.get("spec") or {}).get("volumes") or [] if v.get("memoryDump")}


async def _mount(vmi: dict[str, Any], name: str, source: dict[str, Any], directory: Path) -> Path:
    """Link the claim's image at `<directory>/<name>.img`; a filesystem claim's disk.img is made when missing.

    A memory dump's claim is no disk: its directory is linked at `<directory>/<name>`, where the dump goes."""
    target = Path(str(source.get("path") or ""))
    if name in _memory_dump_volumes(vmi):
        if not target.is_dir():
            raise FileNotFoundError(f"volume {name}: {target} is not a filesystem claim's directory")
        return _link(directory / name, target)
    if target.is_dir():
        image = target / DISK_IMG
        info = _claim_info(vmi, name)
        if info or not image.exists():
            overhead = float(info.get("filesystemOverhead") or DEFAULT_FILESYSTEM_OVERHEAD)
            await prepare_pvc_disk(image, info, overhead=overhead)
        target = image
    elif not (target.is_file() or (target.exists() and stat.S_ISBLK(target.stat().st_mode))):
        raise FileNotFoundError(f"volume {name}: {target} is neither a claim directory, a file nor a block device")
    return _link(directory / f"{name}.img", target)


def _link(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and os.readlink(link) == str(target):
        return link
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    return link


async def sync_hotplug(
    domain: DomainManager,
    vmi: dict[str, Any],
    mounts: dict[str, dict[str, Any]],
    runtime: Path,
    ctx: ConverterContext,
    dumper: MemoryDumper | None = None,
) -> HotplugResult:
    """Mount what virt-handler hands over, attach the volumes ready for it, detach and unmount those that went;
    a mounted memory dump volume virt-handler names a file for gets the guest's memory."""
    directory = runtime / HOTPLUG_DIR
    result = HotplugResult()
    for name, source in sorted(mounts.items()):
        try:
            link = await _mount(vmi, name, source, directory)
            result.mounted.append(name)
        except (OSError, ValueError) as exc:
            log.warning("cannot mount hotplugged volume %s: %s", name, exc)
            continue
        if dumper is not None and source.get("memoryDump"):
            dumper.request(domain, link / Path(str(source["memoryDump"])).name)
    domain_xml = await domain.xml()
    live = live_disks(domain_xml)
    steps = plan(vmi, set(result.mounted), live, str(directory))
    for name in steps.detach:
        element = _disk_element(domain_xml, name)
        if element:
            log.info("detaching hotplugged volume %s", name)
            try:
                await domain.detach_device(element)
            except libvirt.libvirtError as exc:
                result.errors.append(f"detaching volume {name} failed: {exc}")
    for name in steps.attach:
        # cache=none needs O_DIRECT where the image really is, not where its link is.
        real = Path(os.path.realpath(directory / f"{name}.img"))
        direct_io = disks.direct_io_supported(real.parent) if real.is_file() else True
        try:
            element = disk_xml(vmi, name, replace(ctx, share_dir=str(runtime), direct_io=direct_io), live)
            log.info("attaching hotplugged volume %s", name)
            await domain.attach_device(element)
        except (ConversionError, libvirt.libvirtError) as exc:
            result.errors.append(f"attaching volume {name} failed: {exc}")
            continue
        live = live_disks(await domain.xml())
    live = live_disks(await domain.xml())
    prefix = str(directory).rstrip("/") + "/"
    result.attached = {disk.name: disk.target for disk in live if disk.source.startswith(prefix)}
    # A link goes once its volume is neither wanted by virt-handler nor still in the domain.
    if directory.is_dir():
        for link in directory.iterdir():
            name = link.name.removesuffix(".img")
            if name not in mounts and name not in result.attached:
                link.unlink(missing_ok=True)
    return result
