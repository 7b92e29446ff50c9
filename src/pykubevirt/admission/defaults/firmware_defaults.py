"""Firmware defaults: a random UUID (and on VM creation a serial), arm64's non-secure-boot EFI (§4.1)."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.common import obj, random_uuid


def _firmware(spec: dict[str, Any]) -> dict[str, Any] | None:
    domain = obj(spec, "domain")
    return obj(domain, "firmware") if domain is not None else None


def set_firmware_defaults(spec: dict[str, Any], ctx: AdmissionContext) -> None:
    """`firmware: {}` with a random `uuid` when none is given (the VMI object defaults)."""
    firmware = _firmware(spec)
    if firmware is not None and not firmware.get("uuid"):
        firmware["uuid"] = random_uuid(ctx)


def set_vm_firmware_defaults(spec: dict[str, Any], ctx: AdmissionContext) -> None:
    """On VM creation the template gets a random `uuid` and a random `serial` when they are empty."""
    firmware = _firmware(spec)
    if firmware is None:
        return
    if not firmware.get("uuid"):
        firmware["uuid"] = random_uuid(ctx)
    if not firmware.get("serial"):
        firmware["serial"] = random_uuid(ctx)


def set_arm64_bootloader(spec: dict[str, Any]) -> None:
    """arm64 boots UEFI: no bootloader means EFI, and EFI without secureBoot means secureBoot false."""
    firmware = _firmware(spec)
    if firmware is None:
        return
    if firmware.get("bootloader") is None:
        firmware["bootloader"] = {"efi": {}}
    efi = firmware["bootloader"].get("efi") if isinstance(firmware["bootloader"], dict) else None
    if isinstance(efi, dict) and efi.get("secureBoot") is None:
        efi["secureBoot"] = False
