"""Firmware: ACPI tables, bootloader, kernel boot, Secure Boot's need for SMM, and launch security (SEV/SNP/TDX)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.volumes import validate_path
from pykubevirt.api.causes import FIELD_VALUE_FORBIDDEN, Cause, FieldPath, invalid, required
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get


def validate_firmware_acpi(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """`field` is what upstream passes: the spec path plus "acpi" (not the firmware path)."""
    acpi = get(spec, "domain", "firmware", "acpi")
    if acpi is None:
        return []
    slic, msdm = as_str(get(acpi, "slicNameRef")), as_str(get(acpi, "msdmNameRef"))
    if not slic and not msdm:
        return [invalid(str(field), "ACPI was set but no SLIC nor MSDM volume reference was set")]
    volumes = [as_map(v) for v in as_list(spec.get("volumes"))]
    return _acpi_ref(field, slic, volumes, "slicNameRef") + _acpi_ref(field, msdm, volumes, "msdmNameRef")


def _acpi_ref(field: FieldPath, ref: str, volumes: list[dict[str, Any]], name: str) -> list[Cause]:
    if not ref:
        return []
    for volume in volumes:
        if volume.get("name") != ref:
            continue
        if volume.get("secret") is not None:
            return []
        return [invalid(str(field.child(name)), f"{field} refers to Volume of unsupported type.")]
    return [invalid(str(field.child(name)), f"{field} does not have a matching Volume.")]


def validate_firmware(field: FieldPath, firmware: Any) -> list[Cause]:
    """Bootloader exclusivity and kernel boot; `field` is the firmware path."""
    if firmware is None:
        return []
    causes: list[Cause] = []
    bootloader = get(firmware, "bootloader")
    if bootloader is not None and get(bootloader, "efi") is not None and get(bootloader, "bios") is not None:
        path = field.child("bootloader")
        causes.append(invalid(str(path), f"{path} has both EFI and BIOS configured, but they are mutually exclusive."))
    causes += _kernel_boot(field.child("kernelBoot"), get(firmware, "kernelBoot"))
    return causes


def _kernel_boot(field: FieldPath, kernel_boot: Any) -> list[Cause]:
    if kernel_boot is None:
        return []
    container = get(kernel_boot, "container")
    if container is None:
        if as_str(get(kernel_boot, "kernelArgs")):
            return [
                invalid(
                    str(field.child("kernelArgs")), "kernel arguments cannot be provided without an external kernel"
                )
            ]
        return []
    causes: list[Cause] = []
    path = field.child("container")
    if not as_str(get(container, "image")):
        causes.append(required(str(path.child("image")), f"{path} must be defined with an image"))
    kernel_path, initrd_path = as_str(get(container, "kernelPath")), as_str(get(container, "initrdPath"))
    if not kernel_path and not initrd_path:
        causes.append(
            required(str(path), f"{path} must be defined with at least one of the following: kernelPath, initrdPath")
        )
    if kernel_path:
        causes += validate_path(path.child("kernelPath"), kernel_path)
    if initrd_path:
        causes += validate_path(path.child("initrdPath"), initrd_path)
    return causes


def secure_boot_enabled(firmware: Any) -> bool:
    efi = get(firmware, "bootloader", "efi")
    return efi is not None and get(efi, "secureBoot") in (None, True)


def smm_enabled(features: Any) -> bool:
    smm = get(features, "smm")
    return smm is not None and get(smm, "enabled") in (None, True)


def validate_secure_boot(field: FieldPath, domain: Mapping[str, Any]) -> list[Cause]:
    """Secure Boot needs SMM, except under TDX whose firmware carries its keys in ROM; `field` is the domain path."""
    tdx = get(domain, "launchSecurity", "tdx") is not None
    if secure_boot_enabled(domain.get("firmware")) and not smm_enabled(domain.get("features")) and not tdx:
        return [
            invalid(
                str(field), f"{field} has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled."
            )
        ]
    return []


def validate_launch_security(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    launch = get(spec, "domain", "launchSecurity")
    if launch is None:
        return []
    arch = as_str(spec.get("architecture"))
    if arch == "amd64":
        return _launch_security_amd64(field, spec, as_map(launch), ctx)
    if arch == "s390x":
        return []
    return [invalid(str(field.child("architecture")), f"No launchSecurity support for architecture: {arch}")]


def _launch_security_amd64(
    field: FieldPath, spec: Mapping[str, Any], launch: Mapping[str, Any], ctx: AdmissionContext
) -> list[Cause]:
    # Upstream reports all of these on `<spec>.launchSecurity`, not under domain.
    path = str(field.child("launchSecurity"))
    selected = [name for key, name in (("sev", "SEV"), ("snp", "SNP"), ("tdx", "TDX")) if launch.get(key) is not None]
    sev_like = launch.get("sev") is not None or launch.get("snp") is not None
    tdx = launch.get("tdx") is not None
    if len(selected) != 1:
        return [Cause(FIELD_VALUE_FORBIDDEN, "One and only one launchSecurity type can be set", path)]
    if sev_like and not ctx.config.gate_enabled("WorkloadEncryptionSEV"):
        return [invalid(path, "WorkloadEncryptionSEV feature gate is not enabled in kubevirt-config")]
    if tdx and not ctx.config.gate_enabled("WorkloadEncryptionTDX"):
        return [invalid(path, "WorkloadEncryptionTDX feature gate is not enabled in kubevirt-config")]
    kind = selected[0]
    causes: list[Cause] = []
    if tdx and smm_enabled(get(spec, "domain", "features")):
        causes.append(invalid(path, "TDX does not work along with SMM"))
    efi = get(spec, "domain", "firmware", "bootloader", "efi")
    if efi is None:
        causes.append(invalid(path, f"{kind} requires OVMF (UEFI)"))
    else:
        if sev_like and get(efi, "secureBoot") in (None, True):
            causes.append(invalid(path, f"{kind} does not work along with SecureBoot"))
        if (launch.get("snp") is not None or tdx) and get(efi, "persistent") is True:
            causes.append(invalid(path, f"{kind} does not work along with Persistent EFI variables"))
    if (
        launch.get("sev") is not None
        and spec.get("startStrategy") != "Paused"
        and get(launch, "sev", "attestation") is not None
    ):
        causes.append(invalid(path, "SEV attestation requires VMI StartStrategy 'Paused'"))
    for iface in as_list(get(spec, "domain", "devices", "interfaces")):
        if get(iface, "bootOrder") is not None:
            causes.append(invalid(path, f"{kind} does not work with bootable NICs: {as_str(get(iface, 'name'))}"))
    return causes
