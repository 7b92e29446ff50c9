"""Disks: targets, buses, serials, cache/IO/error policies, block sizes, boot order (pkg/storage/admitters/disks.go)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import go_list, is_pci_address, is_true
from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported, required
from pykubevirt.api.json_lookup import as_int, as_list, as_map, as_str, get
from pykubevirt.api.name_validation import dns1123_label_errors

SUPPORTED_BUSES = ("virtio", "scsi", "sata", "usb")
CACHE_MODES = ("none", "writethrough", "writeback")
IO_MODES = ("native", "threads")
ERROR_POLICIES = ("stop", "ignore", "report", "enospace")
_SERIAL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+-")
_MAX_SERIAL_LEN = 256
_MIN_BLOCK_SIZE = 512
_MAX_BLOCK_SIZE = 2097152


def disks_of(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [as_map(d) for d in as_list(get(spec, "domain", "devices", "disks"))]


def disk_type(disk: Mapping[str, Any]) -> str:
    """The target type in upstream's precedence: disk, lun, cdrom; empty when none is set."""
    for key in ("disk", "lun", "cdrom"):
        if disk.get(key) is not None:
            return key
    return ""


def disk_bus(disk: Mapping[str, Any]) -> str:
    kind = disk_type(disk)
    return as_str(get(disk, kind, "bus")) if kind else ""


def validate_disks(field: FieldPath, disks: list[dict[str, Any]]) -> list[Cause]:
    """storageadmitters.ValidateDisks; `field` is the disks list path."""
    causes: list[Cause] = []
    for idx, disk in enumerate(disks):
        causes += _name(field, idx, disks)
        causes += _target(field, idx, disk)
        causes += _pci_address(field, idx, disk)
        causes += _boot_order_value(field, idx, disk)
        causes += _bus(field, idx, disk)
        causes += _serial(field, idx, disk)
        causes += _cache(field, idx, disk)
        causes += _io(field, idx, disk)
        causes += _error_policy(field, idx, disk)
        causes += _name_as_container_name(field, idx, disk)
        causes += _block_size(field, idx, disk)
    return causes


def _name(field: FieldPath, idx: int, disks: list[dict[str, Any]]) -> list[Cause]:
    name = disks[idx].get("name")
    return [
        invalid(
            str(field.index(idx).child("name")),
            f"{field.index(idx)} and {field.index(other)} must not have the same Name.",
        )
        for other in range(idx)
        if disks[other].get("name") == name
    ]


def _target(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    # No target is fine (it defaults to disk); more than one is not.
    if sum(disk.get(key) is not None for key in ("disk", "lun", "cdrom")) > 1:
        return [invalid(str(field.index(idx)), f"{field.index(idx)} can only have a single target type defined")]
    return []


def _pci_address(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    target = disk.get("disk")
    pci = as_str(get(target, "pciAddress"))
    if target is None or not pci:
        return []
    # Upstream builds these paths with an odd extra "domain.devices.disks.disk" segment; kept for identical output.
    odd = field.child("domain", "devices", "disks", "disk").index(idx)
    causes: list[Cause] = []
    if as_str(get(target, "bus")) != "virtio":
        causes.append(
            invalid(
                str(odd.child("pciAddress")),
                f"disk {odd.child('name')} - setting a PCI address is only possible with bus type virtio.",
            )
        )
    if not is_pci_address(pci):
        causes.append(
            invalid(str(odd.child("pciAddress")), f"disk {odd.child('name')} has malformed PCI address ({pci}).")
        )
    return causes


def _boot_order_value(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    order = disk.get("bootOrder")
    if order is not None and as_int(order) < 1:
        return [
            invalid(
                str(field.index(idx).child("bootOrder")), f"{field.index(idx)} must have a boot order > 0, if supplied"
            )
        ]
    return []


def _bus(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    bus, kind = disk_bus(disk), disk_type(disk)
    if not bus:
        return []
    causes: list[Cause] = []
    if bus == "ide":
        causes.append(invalid(str(field.index(idx).child(kind, "bus")), "IDE bus is not supported"))
    elif bus == "virtio":
        if kind == "cdrom":
            causes.append(
                invalid(str(field.index(idx).child("cdrom", "bus")), f"Bus type {bus} is invalid for CD-ROM device")
            )
    elif bus == "sata":
        if disk.get("disk") is not None and is_true(get(disk, "disk", "readonly")):
            causes.append(
                invalid(str(field.index(idx).child("disk", "bus")), f"{bus} hard-disks do not support read-only.")
            )
    elif bus not in ("scsi", "usb"):
        causes.append(
            invalid(
                str(field.index(idx).child(kind, "bus")),
                f"{field.index(idx)} is set with an unrecognized bus {bus}, must be one of: {go_list(SUPPORTED_BUSES)}",
            )
        )
    if is_true(disk.get("dedicatedIOThread")) and bus != "virtio":
        causes.append(
            not_supported(
                str(field.child("domain", "devices", "disks").index(idx)),
                f"IOThreads are not supported for disks on a {bus} bus",
            )
        )
    return causes


def _serial(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    serial = as_str(disk.get("serial"))
    if not serial:
        return []
    causes: list[Cause] = []
    path = str(field.index(idx).child("serial"))
    if not set(serial) <= _SERIAL_CHARS:
        causes.append(
            invalid(
                path, f"{field.index(idx)} must be made up of the following characters [A-Za-z0-9_.+-], if specified"
            )
        )
    if len(serial) > _MAX_SERIAL_LEN:
        causes.append(invalid(path, f"{field.index(idx)} must be less than or equal to 256 in length, if specified"))
    return causes


def _cache(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    cache = as_str(disk.get("cache"))
    if cache and cache not in CACHE_MODES:
        path = field.index(idx).child("cache")
        return [invalid(str(path), f"{path} has invalid value {cache}")]
    return []


def _io(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    io = as_str(disk.get("io"))
    if io and io not in IO_MODES:
        return [
            not_supported(
                str(field.child("domain", "devices", "disks").index(idx).child("io")),
                f"Disk IO mode for {field} is not supported. Supported modes are: native, threads.",
            )
        ]
    return []


def _error_policy(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    policy = disk.get("errorPolicy")
    if policy is not None and policy not in ERROR_POLICIES:
        path = field.index(idx).child("errorPolicy")
        return [invalid(str(path), f'{path} has invalid value "{policy}"')]
    return []


def _name_as_container_name(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    # The disk name becomes a container name, so it must be a DNS-1123 label.
    path = str(field.child("domain", "devices", "disks").index(idx).child("name"))
    return [invalid(path, err) for err in dns1123_label_errors(as_str(disk.get("name")))]


def _block_size(field: FieldPath, idx: int, disk: Mapping[str, Any]) -> list[Cause]:
    block = as_map(disk.get("blockSize"))
    custom = block.get("custom")
    if custom is None:
        return []
    path = field.index(idx).child("blockSize")
    match_volume = block.get("matchVolume")
    if match_volume is not None and get(match_volume, "enabled") in (None, True):
        return [invalid(str(path), "Block size matching can't be enabled together with a custom value")]
    logical, physical = as_int(get(custom, "logical")), as_int(get(custom, "physical"))
    granularity = get(custom, "discardGranularity")
    custom_path = path.child("custom")
    if logical > physical:
        return [
            invalid(
                str(custom_path.child("logical")),
                f"Logical size {logical} must be the same or less than the physical size of {physical}",
            )
        ]
    if disk_bus(disk) == "sata" and logical != _MIN_BLOCK_SIZE:
        return [invalid(str(custom_path.child("logical")), f"Logical size {logical} must be 512 for SATA devices")]
    if granularity is not None and logical != 0 and as_int(granularity) % logical != 0:
        return [
            invalid(
                str(custom_path.child("discardGranularity")),
                f"Discard granularity {as_int(granularity)} must be multiples of logical size {logical}",
            )
        ]
    return _custom_block_size(custom_path, "logical", logical) + _custom_block_size(custom_path, "physical", physical)


def _custom_block_size(path: FieldPath, kind: str, size: int) -> list[Cause]:
    if size < _MIN_BLOCK_SIZE:
        message = f"Provided size of {size} is less than the supported minimum size of {_MIN_BLOCK_SIZE}"
    elif size > _MAX_BLOCK_SIZE:
        message = f"Provided size of {size} is greater than the supported maximum size of {_MAX_BLOCK_SIZE}"
    elif size & (size - 1):
        message = f"Provided size of {size} is not a power of 2"
    else:
        return []
    return [invalid(str(path.child(kind)), message)]


def validate_boot_order(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """validateBootOrder: disks map to volumes, LUN and downwardMetrics targets, unique boot orders."""
    causes: list[Cause] = []
    volumes = {as_str(as_map(v).get("name")): as_map(v) for v in as_list(spec.get("volumes"))}
    disks_path = field.child("domain", "devices", "disks")
    used: set[int] = set()
    for idx, disk in enumerate(disks_of(spec)):
        name = as_str(disk.get("name"))
        volume = volumes.get(name)
        if volume is None:
            if disk.get("cdrom") is None:
                causes.append(
                    invalid(
                        str(disks_path.index(idx).child("name")),
                        f"{disks_path.index(idx).child('Name')} '{name}' not found.",
                    )
                )
            elif not ctx.config.gate_enabled("DeclarativeHotplugVolumes"):
                causes.append(
                    invalid(
                        str(disks_path.index(idx).child("name")),
                        "DeclarativeHotplugVolumes feature gate not enabled, cannot define an empty CD-ROM disk",
                    )
                )
        if (
            disk.get("lun") is not None
            and volume is not None
            and volume.get("persistentVolumeClaim") is None
            and volume.get("dataVolume") is None
        ):
            lun = disks_path.index(idx).child("lun")
            causes.append(
                invalid(str(lun), f"{lun} can only be mapped to a DataVolume or PersistentVolumeClaim volume.")
            )
        if volume is not None and volume.get("downwardMetrics") is not None:
            target = disks_path.index(idx).child("disk")
            bus = as_str(get(disk, "disk", "bus"))
            if disk.get("disk") is None:
                causes.append(
                    required(
                        str(target),
                        f"DownwardMetrics volume must be mapped to a disk, but disk is not set on {target}.",
                    )
                )
            elif bus not in ("virtio", ""):
                causes.append(
                    invalid(
                        str(target.child("bus")),
                        "DownwardMetrics volume must be mapped to virtio bus, "
                        f"but {target.child('bus')} is set to {bus}",
                    )
                )
        if disk.get("bootOrder") is not None:
            order = as_int(disk.get("bootOrder"))
            if order in used:
                path = disks_path.index(idx).child("bootOrder")
                causes.append(invalid(str(path), f"Boot order for {path} already set for a different device."))
            used.add(order)
    causes += _interface_boot_order(field, spec, used)
    return causes


def _interface_boot_order(field: FieldPath, spec: Mapping[str, Any], used: set[int]) -> list[Cause]:
    causes: list[Cause] = []
    ifaces = as_list(get(spec, "domain", "devices", "interfaces"))
    for idx, raw in enumerate(ifaces):
        iface = as_map(raw)
        if iface.get("bootOrder") is None:
            continue
        order = as_int(iface.get("bootOrder"))
        if order < 1:
            # Upstream indexes the spec path itself here (`spec[0]`), not the interface list.
            causes.append(
                invalid(
                    str(field.index(idx).child("bootOrder")),
                    f"{field.index(idx)} must have a boot order > 0, if supplied",
                )
            )
            continue
        path = field.child("domain", "devices", "interfaces").index(idx).child("bootOrder")
        if order in used:
            causes.append(invalid(str(path), f"Boot order for {path} already set for a different device."))
        used.add(order)
    return causes
