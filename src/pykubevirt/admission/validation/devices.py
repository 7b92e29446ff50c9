"""Other devices: inputs, sound, video, GPUs' ramfb, host devices, VSOCK, LUN reservations, panic devices, virtiofs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import is_true
from pykubevirt.api.causes import Cause, FieldPath, invalid
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get

PANIC_DEVICE_MODELS = ("hyperv", "isa", "pvpanic")


def _devices(spec: Mapping[str, Any]) -> dict[str, Any]:
    return as_map(get(spec, "domain", "devices"))


def validate_input_devices(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    for idx, raw in enumerate(as_list(_devices(spec).get("inputs"))):
        device = as_map(raw)
        path = field.child("domain", "devices", "inputs").index(idx)
        if as_str(device.get("bus")) not in ("virtio", "usb", ""):
            causes.append(invalid(str(path.child("bus")), "Input device can have only virtio or usb bus."))
        if device.get("type") != "tablet":
            causes.append(invalid(str(path.child("type")), "Input device can have only tablet type."))
    return causes


def validate_mdev_ramfb(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    count = 0
    for gpu in as_list(_devices(spec).get("gpus")):
        display = get(gpu, "virtualGPUOptions", "display")
        if display is None or get(display, "enabled") not in (None, True):
            continue
        ramfb = get(display, "ramFB")
        if ramfb is None or get(ramfb, "enabled") in (None, True):
            count += 1
    if count > 1:
        return [invalid(str(field.child("GPUs")), "configuring multiple displays with ramfb is not valid ")]
    return []


def validate_host_devices_gate(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    if _devices(spec).get("hostDevices") is not None and not ctx.config.gate_enabled("HostDevices"):
        return [invalid(str(field.child("HostDevices")), "Host Devices feature gate is not enabled in kubevirt-config")]
    return []


def validate_sound(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    sound = _devices(spec).get("sound")
    if sound is None:
        return []
    causes: list[Cause] = []
    if as_str(get(sound, "model")) not in ("", "ich9", "ac97"):
        causes.append(
            invalid(str(field.child("Sound")), "Sound device type is not supported. Options: 'ich9' or 'ac97'")
        )
    if not as_str(get(sound, "name")):
        causes.append(invalid(str(field.child("Sound")), "Sound device requires a name field."))
    return causes


def validate_vsock(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    if not is_true(_devices(spec).get("autoattachVSOCK")) or ctx.config.gate_enabled("VSOCK"):
        return []
    return [
        invalid(
            str(field.child("domain", "devices", "autoattachVSOCK")),
            "VSOCK feature gate is not enabled in kubevirt-config",
        )
    ]


def validate_persistent_reservation(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    has_reservation = any(
        get(disk, "lun") is not None and is_true(get(disk, "lun", "reservation"))
        for disk in as_list(_devices(spec).get("disks"))
    )
    # Upstream reads a literal featureGates entry or PersistentReservationConfiguration, not the GA state;
    # INDEX.md (scenario 048) expects GA semantics, so the gate check follows the project's gate rules.
    if not has_reservation or ctx.config.gate_enabled("PersistentReservation"):
        return []
    return [
        invalid(
            str(field.child("domain", "devices", "disks", "luns", "reservation")),
            "persistent reservation is not enabled in kubevirt config",
        )
    ]


def validate_downward_metrics_device(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    if _devices(spec).get("downwardMetrics") is None or ctx.config.gate_enabled("DownwardMetrics"):
        return []
    return [
        invalid(
            str(field.child("domain", "devices", "downwardMetrics")),
            "downwardMetrics virtio serial is not allowed: DownwardMetrics feature gate is not enabled",
        )
    ]


def validate_virtiofs_filesystems(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    filesystems = _devices(spec).get("filesystems")
    if filesystems is None:
        return []
    volumes = {as_str(as_map(v).get("name")): as_map(v) for v in as_list(spec.get("volumes"))}
    causes: list[Cause] = []
    for fs in as_list(filesystems):
        volume = volumes.get(as_str(get(fs, "name")))
        if volume is None:
            continue
        is_storage = volume.get("persistentVolumeClaim") is not None or volume.get("dataVolume") is not None
        if is_storage and not ctx.config.gate_enabled("EnableVirtioFsStorageVolumes"):
            causes.append(
                invalid(
                    str(field.child("domain", "devices", "filesystems")),
                    "virtiofs is not allowed: virtiofs feature gate is not enabled for PVC",
                )
            )
    return causes


def validate_video(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    devices = _devices(spec)
    if devices.get("video") is None or devices.get("autoattachGraphicsDevice") is not False:
        return []
    # Upstream's path here is `<spec>.video`.
    return [
        invalid(
            str(field.child("video")),
            "Video configuration is not allowed when autoattachGraphicsDevice is set to false",
        )
    ]


def validate_panic_devices(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    devices = as_list(_devices(spec).get("panicDevices"))
    if not devices:
        return []
    causes: list[Cause] = []
    arch = as_str(spec.get("architecture")) or ctx.config.architecture
    path = field.child("domain", "devices", "panicDevices")
    if arch == "s390x":
        causes.append(invalid(str(path), f"custom panic devices are not supported on {arch} architecture"))
    for idx, device in enumerate(devices):
        model = get(device, "model")
        if model is not None and model not in PANIC_DEVICE_MODELS:
            causes.append(invalid(str(path.index(idx).child("model")), f"invalid PanicDeviceModel({model})"))
    return causes
