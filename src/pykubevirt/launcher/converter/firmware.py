"""`<os>` (machine type, SMBIOS mode, EFI/BIOS, kernel boot, ACPI tables, boot menu) and `<sysinfo>`."""

from __future__ import annotations

import posixpath

from pykubevirt.api.json_lookup import get
from pykubevirt.api.kernel_boot import artifact_path, kernel_boot_container
from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.context import ConversionError, ConverterContext
from pykubevirt.launcher.converter.xml import Element, element, sub, yes_no
from pykubevirt.launcher.host_firmware import OVMF_PACKAGE

# How long the boot menu waits when a VMI starts paused, so a console user can pick a device.
PAUSED_BOOT_MENU_TIMEOUT_MS = 10000


def _efi(vmi: v.Obj, ctx: ConverterContext, os_el: Element) -> None:
    efi = v.mapping(v.domain(vmi), "firmware", "bootloader", "efi")
    secure = v.flag(efi.get("secureBoot"), True)
    nvram = posixpath.join(ctx.nvram_path, f"{get(vmi, 'metadata', 'name')}_VARS.fd")
    if ctx.efi_firmware_autoselect and secure:
        # libvirt picks a Secure Boot build with enrolled keys from the firmware descriptors (KubeVirt does the
        # same when its launcher supports auto-selection).
        os_el.set("firmware", "efi")
        info = element("firmware")
        sub(info, "feature", {"enabled": "yes", "name": "secure-boot"})
        sub(info, "feature", {"enabled": "yes", "name": "enrolled-keys"})
        os_el.insert(0, info)
        sub(os_el, "nvram", {"format": "raw"}, text=nvram)
        return
    code, template = (ctx.efi_secure_code, ctx.efi_secure_vars) if secure else (ctx.efi_code, ctx.efi_vars)
    if not (code and template):
        # KubeVirt's launcher fails the sync with "EFI OVMF rom missing"; the package is what a node here lacks.
        mode = "enabled" if secure else "disabled"
        raise ConversionError(
            f"EFI OVMF rom missing for booting in EFI mode with SecureBoot {mode}: "
            f"install the {OVMF_PACKAGE} package on the node (make setup)"
        )
    sub(os_el, "loader", {"readonly": "yes", "secure": yes_no(secure), "type": "pflash"}, text=code)
    sub(os_el, "nvram", {"template": template}, text=nvram)


def _acpi_tables(vmi: v.Obj, ctx: ConverterContext) -> Element | None:
    acpi = get(v.domain(vmi), "firmware", "acpi")
    if acpi is None:
        return None
    refs = [("slic", acpi.get("slicNameRef")), ("msdm", acpi.get("msdmNameRef"))]
    if not any(name for _, name in refs):
        raise ConversionError("no ACPI tables were set, expecting at least one")
    volumes = {vol.get("name"): vol for vol in v.items(vmi, "spec", "volumes")}
    tables = element("acpi")
    for kind, name in refs:
        if not name:
            continue
        volume = volumes.get(name)
        if volume is None:
            raise ConversionError(f"firmware's volume for {kind} was not found")
        if volume.get("secret") is None:
            raise ConversionError(f"firmware's volume type is unsupported for {kind}")
        sub(tables, "table", {"type": kind}, text=f"{ctx.private_dir}/secret/{name}/{kind}.bin")
    return tables


def build_os(vmi: v.Obj, ctx: ConverterContext) -> Element:
    dom = v.domain(vmi)
    os_el = element("os")
    sub(os_el, "type", {"arch": ctx.architecture, "machine": get(dom, "machine", "type") or "q35"}, text="hvm")
    tables = _acpi_tables(vmi, ctx)
    if tables is not None:
        os_el.append(tables)
    # amd64 guests read their identity from the `<sysinfo>` block.
    sub(os_el, "smbios", {"mode": "sysinfo"})
    if v.spec(vmi).get("startStrategy") == "Paused":
        sub(os_el, "bootmenu", {"enable": "yes", "timeout": PAUSED_BOOT_MENU_TIMEOUT_MS})
    bootloader = v.mapping(dom, "firmware", "bootloader")
    if get(bootloader, "bios", "useSerial"):
        sub(os_el, "bios", {"useserial": "yes"})
    if v.is_efi(vmi):
        _efi(vmi, ctx, os_el)
    kernel_boot = v.mapping(dom, "firmware", "kernelBoot")
    container = kernel_boot_container(vmi)
    if container is not None:
        # The launcher links the image's files there before the domain starts (launcher/kernel_boot.py).
        if container.get("kernelPath"):
            sub(os_el, "kernel", text=artifact_path(ctx.container_disk_dir, container["kernelPath"]))
        if container.get("initrdPath"):
            sub(os_el, "initrd", text=artifact_path(ctx.container_disk_dir, container["initrdPath"]))
    if kernel_boot.get("kernelArgs"):
        sub(os_el, "cmdline", text=kernel_boot["kernelArgs"])
    return os_el


def build_sysinfo(vmi: v.Obj, ctx: ConverterContext) -> Element:
    """SMBIOS system entries (firmware uuid/serial + the cluster identity) and chassis; no `<uuid>` element."""
    # libvirt takes the domain UUID from the system uuid entry, so the guest and libvirt agree on it.
    sysinfo = element("sysinfo", {"type": "smbios"})
    system = sub(sysinfo, "system")
    firmware = get(v.domain(vmi), "firmware")
    if isinstance(firmware, dict):
        sub(system, "entry", {"name": "uuid"}, text=str(firmware.get("uuid") or ""))
        if firmware.get("serial"):
            sub(system, "entry", {"name": "serial"}, text=str(firmware["serial"]))
    smbios = ctx.smbios
    for name, value in (
        ("manufacturer", smbios.manufacturer),
        ("family", smbios.family),
        ("product", smbios.product),
        ("sku", smbios.sku),
        ("version", smbios.version),
    ):
        sub(system, "entry", {"name": name}, text=value)
    chassis = get(v.domain(vmi), "chassis")
    if isinstance(chassis, dict):
        chassis_el = sub(sysinfo, "chassis")
        for name in ("manufacturer", "version", "serial", "asset", "sku"):
            sub(chassis_el, "entry", {"name": name}, text=str(chassis.get(name) or ""))
    return sysinfo
