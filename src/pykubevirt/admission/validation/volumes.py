"""Volumes: unique names, exactly one source, hostDisk, configMap/secret/serviceAccount, container disk paths."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.cloudinit import validate_cloud_init
from pykubevirt.api.causes import Cause, FieldPath, invalid, required
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get, parse_quantity
from pykubevirt.api.name_validation import dns1123_subdomain_errors

FIELD_VALUE_NOT_FOUND = "FieldValueNotFound"

# Every VolumeSource member; a volume must set exactly one.
VOLUME_SOURCES = (
    "persistentVolumeClaim",
    "sysprep",
    "cloudInitNoCloud",
    "cloudInitConfigDrive",
    "containerDisk",
    "ephemeral",
    "emptyDisk",
    "hostDisk",
    "dataVolume",
    "configMap",
    "secret",
    "downwardAPI",
    "serviceAccount",
    "downwardMetrics",
    "memoryDump",
    "containerPath",
)
_RESERVED_CONTAINER_PATH_PREFIXES = ("/var/run/kubevirt", "/var/run/libvirt")


def volumes_of(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [as_map(v) for v in as_list(spec.get("volumes"))]


def validate_volumes(field: FieldPath, volumes: list[dict[str, Any]], ctx: AdmissionContext) -> list[Cause]:
    """validateVolumes; `field` is the volumes list path."""
    causes: list[Cause] = []
    first_by_name: dict[str, int] = {}
    service_accounts = downward_metrics = memory_dumps = 0
    for idx, volume in enumerate(volumes):
        path = field.index(idx)
        name = as_str(volume.get("name"))
        if name in first_by_name:
            causes.append(
                invalid(
                    str(path.child("name")),
                    f"{path} and {field.index(first_by_name[name])} must not have the same Name.",
                )
            )
        else:
            first_by_name[name] = idx

        if volume.get("dataVolume") is not None and not as_str(get(volume, "dataVolume", "name")):
            causes.append(required(str(path.child("name")), "DataVolume 'name' must be set"))
        service_accounts += volume.get("serviceAccount") is not None
        downward_metrics += volume.get("downwardMetrics") is not None
        memory_dumps += volume.get("memoryDump") is not None
        if sum(volume.get(key) is not None for key in VOLUME_SOURCES) != 1:
            causes.append(invalid(str(path), f"{path} must have exactly one source type set"))

        causes += validate_cloud_init(path, volume)

        if volume.get("downwardMetrics") is not None and not ctx.config.gate_enabled("DownwardMetrics"):
            causes.append(
                invalid(
                    str(path), "downwardMetrics disks are not allowed: DownwardMetrics feature gate is not enabled."
                )
            )
        if volume.get("hostDisk") is not None:
            causes += _host_disk(path, as_map(volume.get("hostDisk")), ctx)
        if volume.get("configMap") is not None and not as_str(get(volume, "configMap", "name")):
            p = path.child("configMap", "name")
            causes.append(invalid(str(p), f"{p} is a required field"))
        if volume.get("secret") is not None and not as_str(get(volume, "secret", "secretName")):
            p = path.child("secret", "secretName")
            causes.append(invalid(str(p), f"{p} is a required field"))
        if volume.get("serviceAccount") is not None and not as_str(get(volume, "serviceAccount", "serviceAccountName")):
            p = path.child("serviceAccount", "serviceAccountName")
            causes.append(invalid(str(p), f"{p} is a required field"))

    if service_accounts > 1:
        causes.append(invalid(str(field), f"{field} must have max one serviceAccount volume set"))
    if downward_metrics > 1:
        causes.append(invalid(str(field), f"{field} must have max one downwardMetric volume set"))
    if memory_dumps > 1:
        causes.append(invalid(str(field), f"{field} must have max one memory dump volume set"))
    return causes


def _host_disk(path: FieldPath, host_disk: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    causes: list[Cause] = []
    if not ctx.config.gate_enabled("HostDisk"):
        causes.append(invalid(str(path), "HostDisk feature gate is not enabled"))
    if not as_str(host_disk.get("path")):
        p = path.child("hostDisk", "path")
        causes.append(Cause(FIELD_VALUE_NOT_FOUND, f"{p} is required for hostDisk volume", str(p)))
    kind = as_str(host_disk.get("type"))
    type_path = path.child("hostDisk", "type")
    if kind not in ("Disk", "DiskOrCreate"):
        causes.append(
            invalid(str(type_path), f"{type_path} has invalid value '{kind}', allowed are 'Disk' or 'DiskOrCreate'")
        )
    capacity = parse_quantity(host_disk.get("capacity"))
    # Capacity only makes sense when KubeVirt creates the image.
    if kind == "Disk" and capacity is not None and not capacity.is_zero():
        p = path.child("hostDisk", "capacity")
        causes.append(invalid(str(p), f"{p} is allowed to pass only with {type_path} equal to 'DiskOrCreate'"))
    return causes


def validate_path(field: FieldPath, path: str) -> list[Cause]:
    """storageadmitters.ValidatePath: absolute, no relative components, not the root."""
    if path == "/":
        return [invalid(str(field), f"{field} must not point to root")]
    cleaned = posixpath.normpath("/" + path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    # Go's strings.TrimSuffix drops a single trailing slash, as filepath.Join does.
    if cleaned != path.removesuffix("/"):
        return [invalid(str(field), f"{field} must be an absolute path to a file without relative components")]
    return []


def validate_container_disks(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    for idx, volume in enumerate(volumes_of(spec)):
        path = as_str(get(volume, "containerDisk", "path"))
        if volume.get("containerDisk") is None or not path:
            continue
        causes += validate_path(field.child("volumes").index(idx).child("containerDisk"), path)
    return causes


def validate_utility_volumes_on_creation(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    if spec.get("utilityVolumes") is not None:
        return [
            invalid(
                str(field.child("utilityVolumes")),
                "cannot create VMI with utility volumes in spec, utility volumes can only be added via hotplug",
            )
        ]
    return []


def validate_volume_disks(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """VMI-only: each volume is used by a disk or filesystem (VM templates get disks added by defaulting)."""
    causes: list[Cause] = []
    devices = as_map(get(spec, "domain", "devices"))
    disk_names = {as_str(as_map(d).get("name")) for d in as_list(devices.get("disks"))}
    fs_names = {as_str(as_map(f).get("name")) for f in as_list(devices.get("filesystems"))}
    volumes_path = field.child("domain", "volumes")
    for idx, volume in enumerate(volumes_of(spec)):
        if volume.get("memoryDump") is not None:
            continue
        name = as_str(volume.get("name"))
        has_disk, has_fs = name in disk_names, name in fs_names
        if not has_disk and not has_fs:
            p = volumes_path.index(idx).child("name")
            causes.append(invalid(str(p), f"{p} '{name}' not found."))
        if volume.get("containerPath") is not None:
            vp = str(volumes_path.index(idx))
            if has_disk:
                causes.append(invalid(vp, f"ContainerPath volume '{name}' must be mapped to a filesystem, not a disk"))
            if not has_fs:
                causes.append(
                    invalid(
                        vp,
                        f"ContainerPath volume '{name}' must have a matching filesystem defined in "
                        "spec.domain.devices.filesystems",
                    )
                )
            container_path = as_str(get(volume, "containerPath", "path"))
            for prefix in _RESERVED_CONTAINER_PATH_PREFIXES:
                if container_path.startswith(prefix):
                    causes.append(
                        invalid(
                            str(volumes_path.index(idx).child("containerPath", "path")),
                            f"ContainerPath volume '{name}' uses reserved path prefix '{prefix}'",
                        )
                    )
                    break
    return causes


def validate_service_account_name(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    name = as_str(spec.get("serviceAccountName"))
    if not name:
        return []
    causes: list[Cause] = []
    path = field.child("serviceAccountName")
    errors = dns1123_subdomain_errors(name)
    if errors:
        causes.append(invalid(str(path), f"{path} is not a valid service account name: {'; '.join(errors)}"))
    for volume in volumes_of(spec):
        sa = volume.get("serviceAccount")
        if sa is not None and as_str(get(sa, "serviceAccountName")) != name:
            other = as_str(get(sa, "serviceAccountName"))
            causes.append(
                invalid(
                    str(path),
                    f'spec.serviceAccountName "{name}" and serviceAccount volume "{other}" '
                    "must reference the same service account",
                )
            )
            break
    return causes
