"""Hotplug decisions and the `<disk>` of one hotplugged volume. Pure.

KubeVirt's launcher converts the whole VMI again and attaches the disks that appear (and detaches those that went,
`pkg/virt-launcher/virtwrap/manager.go` hotplug handling). Here the disk element is converted from the VMI cut down
to that one volume, and its target moved past the targets the running domain already uses.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.context import ConversionError, ConverterContext
from pykubevirt.launcher.converter.disks import (
    BUS_PREFIX,
    HOTPLUG_READY_PHASES,
    build_disks,
    device_name,
    io_thread_plan,
)
from pykubevirt.launcher.converter.xml import to_string

ALIAS_PREFIX = "ua-"


@dataclass(frozen=True, slots=True)
class LiveDisk:
    """A disk of the running domain: its volume (from the `ua-` alias), target, bus, SCSI unit and source file."""

    name: str
    target: str
    bus: str
    unit: int | None
    source: str


@dataclass(frozen=True, slots=True)
class HotplugPlan:
    attach: tuple[str, ...]
    detach: tuple[str, ...]


def wanted_volumes(vmi: v.Obj, mounted: set[str]) -> set[str]:
    """Hotplugged volumes still in the spec, mounted into the pod and past MountedToPod: those the guest gets (a
    memory dump's claim is no disk of the guest)."""
    in_spec = {str(vol.get("name")) for vol in v.items(vmi, "spec", "volumes") if vol.get("memoryDump") is None}
    return {
        str(status.get("name"))
        for status in v.items(vmi, "status", "volumeStatus")
        if status.get("hotplugVolume") is not None
        and status.get("phase") in HOTPLUG_READY_PHASES
        and status.get("name") in in_spec
        and status.get("name") in mounted
    }


def plan(vmi: v.Obj, mounted: set[str], live: list[LiveDisk], hotplug_dir: str) -> HotplugPlan:
    """What to attach (wanted, not in the domain) and detach (hotplugged disks of the domain no longer wanted)."""
    wanted = wanted_volumes(vmi, mounted)
    present = {disk.name for disk in live}
    hotplugged = {disk.name for disk in live if disk.source.startswith(hotplug_dir.rstrip("/") + "/")}
    return HotplugPlan(attach=tuple(sorted(wanted - present)), detach=tuple(sorted(hotplugged - wanted)))


def _free_index(prefix: str, bus: str, live: list[LiveDisk]) -> int:
    used_targets = {disk.target for disk in live}
    used_units = {disk.unit for disk in live if disk.bus == "scsi"}
    for index in range(26**2):
        if device_name(prefix, index) not in used_targets and (bus != "scsi" or index not in used_units):
            return index
    raise ConversionError("no free target name for a hotplugged disk")


def disk_xml(vmi: v.Obj, name: str, ctx: ConverterContext, live: list[LiveDisk]) -> str:
    """The `<disk>` of hotplugged volume `name`, on a target and SCSI unit the running domain does not use."""
    cut = copy.deepcopy(dict(vmi))
    spec = cut.setdefault("spec", {})
    devices = spec.setdefault("domain", {}).setdefault("devices", {})
    devices["disks"] = [d for d in devices.get("disks") or [] if d.get("name") == name]
    spec["volumes"] = [vol for vol in spec.get("volumes") or [] if vol.get("name") == name]
    statuses = [s for s in (cut.get("status") or {}).get("volumeStatus") or [] if s.get("name") == name]
    if not devices["disks"] or not spec["volumes"] or not statuses:
        raise ConversionError(f"volume {name} is not a hotplugged disk of the VMI")
    # The target is chosen below against the live domain, not kept from the status.
    cut["status"] = {"volumeStatus": [{**statuses[0], "target": "", "phase": "MountedToPod"}]}
    elements = build_disks(cut, ctx, io_thread_plan(cut))
    if not elements:
        raise ConversionError(f"volume {name} is not a hotplugged disk of the VMI")
    disk_el = elements[0]
    target = disk_el.find("target")
    assert target is not None
    bus = target.get("bus") or ""
    prefix = BUS_PREFIX.get(bus, "sd")
    index = _free_index(prefix, bus, live)
    target.set("dev", device_name(prefix, index))
    address = disk_el.find("address")
    if address is not None and address.get("type") == "drive":
        address.set("unit", str(index))
    return to_string(disk_el)


_UNIT = re.compile(r"^\d+$")


def live_disk(name: str, target: str, bus: str, unit: str | None, source: str) -> LiveDisk | None:
    """A LiveDisk from a domain XML's disk fields; None for disks that are not a volume's (no `ua-` alias)."""
    if not name.startswith(ALIAS_PREFIX):
        return None
    return LiveDisk(
        name=name[len(ALIAS_PREFIX) :],
        target=target,
        bus=bus,
        unit=int(unit) if unit is not None and _UNIT.match(unit) else None,
        source=source,
    )
