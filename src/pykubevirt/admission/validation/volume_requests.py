"""VM `status.volumeRequests` (hotplug add/remove): well formed, not duplicated, and valid once applied."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import is_true
from pykubevirt.admission.validation.disks import disk_bus
from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported
from pykubevirt.api.constants import VMI_KIND
from pykubevirt.api.json_lookup import as_int, as_list, as_map, as_str, get

_FIELD = "Status.volumeRequests"
SpecValidator = Callable[[Mapping[str, Any], FieldPath, AdmissionContext], list[Cause]]


def hotplug_disk_problem(disk: Any, name: str, prefix: str, field: str) -> list[Cause]:
    """storageadmitters.ValidateHotplugDiskConfiguration."""
    if not isinstance(disk, Mapping):
        return [invalid(field, f"{prefix} for [{name}] requires the disk field to be set.")]
    bus = disk_bus(disk)
    if disk.get("disk") is not None:
        if bus not in ("scsi", "virtio"):
            return [
                invalid(
                    field,
                    f"{prefix} for disk [{name}] requires bus to be 'scsi' or 'virtio'. [{bus}] is not permitted.",
                )
            ]
    elif disk.get("lun") is not None:
        if bus != "scsi":
            return [invalid(field, f"{prefix} for LUN [{name}] requires bus to be 'scsi'. [{bus}] is not permitted.")]
    else:
        return [invalid(field, f"{prefix} for [{name}] requires diskDevice of type 'disk' or 'lun' to be used.")]
    if is_true(disk.get("dedicatedIOThread")) and bus != "virtio":
        return [invalid(field, f"{prefix} for [{name}] requires virtio bus for IOThreads.")]
    if disk.get("bootOrder") is not None and as_int(disk.get("bootOrder")) < 1:
        # Upstream hard-codes this index and path.
        return [
            invalid(
                "spec.domain.devices.disks[1].bootOrder",
                "spec.domain.devices.disks[1] must have a boot order > 0, if supplied",
            )
        ]
    return []


def _normalized(value: Any) -> Any:
    """Drop zero values so two volumes compare the way Go's semantic DeepEqual compares structs."""
    if isinstance(value, Mapping):
        out = {k: _normalized(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, False, "", 0, [])}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def _requested_volume(options: Mapping[str, Any]) -> dict[str, Any]:
    volume: dict[str, Any] = {"name": options.get("name")}
    for key in ("persistentVolumeClaim", "dataVolume"):
        source = get(options, "volumeSource", key)
        if source is not None:
            volume[key] = source
            break
    return volume


def apply_volume_request(spec: dict[str, Any], request: Mapping[str, Any]) -> None:
    """controller.ApplyVolumeRequestOnVMISpec on a spec dict."""
    add, remove = request.get("addVolumeOptions"), request.get("removeVolumeOptions")
    volumes = [v for v in as_list(spec.get("volumes")) if isinstance(v, dict)]
    devices = spec.setdefault("domain", {}).setdefault("devices", {})
    disks = [d for d in as_list(devices.get("disks")) if isinstance(d, dict)]
    if isinstance(add, Mapping):
        name = add.get("name")
        if any(v.get("name") == name for v in volumes):
            return
        volume: dict[str, Any] = {"name": name}
        for key in ("persistentVolumeClaim", "dataVolume"):
            source = get(add, "volumeSource", key)
            if source is not None:
                volume[key] = {**copy.deepcopy(dict(source)), "hotpluggable": True}
                break
        spec["volumes"] = [*volumes, volume]
        if isinstance(add.get("disk"), Mapping):
            devices["disks"] = [*disks, {**copy.deepcopy(dict(add["disk"])), "name": name}]
    elif isinstance(remove, Mapping):
        name = remove.get("name")
        spec["volumes"] = [v for v in volumes if v.get("name") != name]
        devices["disks"] = [d for d in disks if d.get("name") != name]


def _is_migrating(vmi: Mapping[str, Any], ctx: AdmissionContext) -> bool:
    start, end = (
        get(vmi, "status", "migrationState", "startTimestamp"),
        get(vmi, "status", "migrationState", "endTimestamp"),
    )
    if not start:
        return False
    if ctx.now is None:
        return not end
    now = _parse_time(ctx.now())
    started, ended = _parse_time(as_str(start)), _parse_time(as_str(end)) if end else None
    if now is None or started is None:
        return not end
    return now >= started and (ended is None or now < ended)


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def validate_volume_requests(vm: Mapping[str, Any], ctx: AdmissionContext, validate_spec: SpecValidator) -> list[Cause]:
    """validateVolumeRequests; `validate_spec` is the shared VMI spec validator (passed in to avoid a cycle)."""
    requests = [as_map(r) for r in as_list(get(vm, "status", "volumeRequests"))]
    if not requests:
        return []
    template_spec = as_map(get(vm, "spec", "template", "spec"))
    vmi: dict[str, Any] | None = None
    if is_true(get(vm, "status", "ready")):
        namespace = as_str(get(vm, "metadata", "namespace")) or "default"
        found = ctx.lookup.get(VMI_KIND, namespace, as_str(get(vm, "metadata", "name")))
        if found is not None and get(found, "metadata", "deletionTimestamp") is None:
            vmi = copy.deepcopy(dict(found))
    vm_volumes = {as_str(as_map(v).get("name")): as_map(v) for v in as_list(template_spec.get("volumes"))}
    vmi_volumes = {as_str(as_map(v).get("name")): as_map(v) for v in as_list(get(vmi, "spec", "volumes"))}
    new_spec = copy.deepcopy(template_spec)
    added: set[str] = set()
    removed: set[str] = set()
    for request in requests:
        add, remove = request.get("addVolumeOptions"), request.get("removeVolumeOptions")
        if add is not None and remove is not None:
            return [
                invalid(
                    _FIELD, "VolumeRequests require either addVolumeOptions or removeVolumeOptions to be set, not both"
                )
            ]
        if add is not None:
            name = as_str(get(add, "name"))
            if name in added:
                return [invalid(_FIELD, f"AddVolume request for [{name}] aleady exists")]
            problem = hotplug_disk_problem(get(add, "disk"), name, "AddVolume request", _FIELD)
            if problem:
                return problem
            wanted = _normalized(_requested_volume(as_map(add)))
            if name in vm_volumes and _normalized(vm_volumes[name]) != wanted:
                return [
                    invalid(
                        _FIELD,
                        f"AddVolume request for [{name}] conflicts with an existing volume of the same name on the vmi "
                        "template.",
                    )
                ]
            if name in vmi_volumes and _normalized(vmi_volumes[name]) != wanted:
                return [
                    invalid(
                        _FIELD,
                        f"AddVolume request for [{name}] conflicts with an existing volume of the same name "
                        "on currently running vmi",
                    )
                ]
            added.add(name)
        elif remove is not None:
            name = as_str(get(remove, "name"))
            if name in removed:
                return [invalid(_FIELD, f"RemoveVolume request for [{name}] aleady exists")]
            removed.add(name)
        else:
            return [
                invalid(
                    _FIELD, "VolumeRequests require one of either addVolumeOptions or removeVolumeOptions to be set"
                )
            ]
        apply_volume_request(new_spec, request)
        if vmi is not None:
            apply_volume_request(vmi.setdefault("spec", {}), request)
    path = FieldPath("spec").child("template", "spec")
    causes = validate_spec(new_spec, path, ctx)
    if causes:
        return causes
    if vmi is not None:
        causes = validate_spec(as_map(vmi.get("spec")), path, ctx)
        if causes:
            return causes
        if _is_migrating(vmi, ctx):
            return [not_supported("spec", "Cannot handle volume requests while VMI migration is in progress")]
    return []
