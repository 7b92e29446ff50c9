"""VMI-only checks: per-architecture device support and Hyper-V feature dependencies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported, required
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get

_VIDEO_TYPES = {
    "amd64": ("vga", "cirrus", "virtio", "ramfb", "bochs"),
    "arm64": ("virtio", "ramfb"),
    "s390x": ("virtio",),
}
_ARM64_BUSES = ("", "virtio", "scsi")


def validate_per_arch(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    arch = as_str(spec.get("architecture"))
    if arch == "amd64":
        return _watchdog(field, spec, "i6300esb", "diag288", "amd64 only supports I6300ESB watchdog device") + _video(
            field, spec, arch
        )
    if arch == "s390x":
        return _watchdog(field, spec, "diag288", "i6300esb", "s390x only supports Diag288 watchdog device") + _video(
            field, spec, arch
        )
    if arch == "arm64":
        return _arm64(field, spec)
    return [invalid(str(field.child("architecture")), f"unsupported architecture: {arch}")]


def _watchdog(field: FieldPath, spec: Mapping[str, Any], wanted: str, other: str, message: str) -> list[Cause]:
    watchdog = get(spec, "domain", "devices", "watchdog")
    if watchdog is None or (get(watchdog, wanted) is not None and get(watchdog, other) is None):
        return []
    return [not_supported(str(field.child("domain", "devices", "watchdog")), message)]


def _video(field: FieldPath, spec: Mapping[str, Any], arch: str) -> list[Cause]:
    video = get(spec, "domain", "devices", "video")
    if video is None:
        return []
    kind = as_str(get(video, "type"))
    if kind in _VIDEO_TYPES[arch]:
        return []
    return [
        not_supported(
            str(field.child("domain", "devices", "video", "type")),
            f"video model '{kind}' is not supported on {arch} architecture",
        )
    ]


def _arm64(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    if get(spec, "domain", "firmware", "bootloader", "bios") is not None:
        causes.append(
            not_supported(
                str(field.child("domain", "firmware", "bootloader", "bios")),
                "Arm64 does not support bios boot, please change to uefi boot",
            )
        )
    model = as_str(get(spec, "domain", "cpu", "model"))
    if model and model != "host-passthrough":
        causes.append(
            not_supported(
                str(field.child("domain", "cpu", "model")),
                "currently, host-passthrough is the only model supported on Arm64",
            )
        )
    for idx, raw in enumerate(as_list(get(spec, "domain", "devices", "disks"))):
        disk = as_map(raw)
        for kind in ("disk", "cdrom", "lun"):
            if disk.get(kind) is not None and as_str(get(disk, kind, "bus")) not in _ARM64_BUSES:
                causes.append(
                    not_supported(
                        str(field.child("domain", "devices", "disks").index(idx).child(kind, "bus")),
                        "Arm64 not support this disk bus type, please use virtio or scsi",
                    )
                )
    if get(spec, "domain", "devices", "watchdog") is not None:
        causes.append(
            not_supported(str(field.child("domain", "devices", "watchdog")), "Arm64 not support Watchdog device")
        )
    if get(spec, "domain", "devices", "sound") is not None:
        causes.append(not_supported(str(field.child("domain", "devices", "sound")), "Arm64 not support sound device"))
    return causes + _video(field, spec, "arm64")


def _enabled(state: Any) -> bool:
    return get(state, "enabled") is True


def validate_hyperv(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """`field` is the hyperv path; upstream appends domain.features.hyperv to it again for the feature paths."""
    features = get(spec, "domain", "features")
    hyperv = get(features, "hyperv")
    causes: list[Cause] = []
    if hyperv is not None:
        base = field.child("domain", "features", "hyperv")
        synictimer = {"enabled": get(hyperv, "synictimer", "enabled")}
        tlbflush = {"enabled": get(hyperv, "tlbflush", "enabled")} if get(hyperv, "tlbflush") is not None else None
        # Leaves first, as upstream lists them.
        dependencies = (
            ("evmcs", get(hyperv, "evmcs"), "vapic"),
            ("ipi", get(hyperv, "ipi"), "vpindex"),
            ("tlbflush", tlbflush, "vpindex"),
            ("synictimer", synictimer, "synic"),
            ("synic", get(hyperv, "synic"), "vpindex"),
        )
        for name, state, needs in dependencies:
            if _enabled(state) and not _enabled(get(hyperv, needs)):
                path = base.child(name)
                causes.append(invalid(str(path), f"'{path}' requires '{base.child(needs)}', which was disabled."))
        evmcs = get(hyperv, "evmcs")
        if evmcs is not None and get(evmcs, "enabled") is not False:
            cpu_features = as_list(get(spec, "domain", "cpu", "features"))
            if not cpu_features:
                causes.append(required("spec.domain.cpu.features", "vmx cpu feature is required when evmcs is set"))
            else:
                for idx, feature in enumerate(cpu_features):
                    if get(feature, "name") == "vmx" and get(feature, "policy") != "require":
                        causes.append(
                            invalid(
                                f"spec.domain.cpu.features[{idx}].policy",
                                "vmx cpu feature has to be set to require policy",
                            )
                        )
    if hyperv is not None and get(features, "hypervPassthrough") is not None:
        causes.append(
            invalid(
                str(field),
                "Cannot explicitly set hyperV features if HypervPassthrough is being used. "
                "Please use either HyperV or HypervPassthrough.",
            )
        )
    return causes
