"""`<devices>`: channels, controllers, graphics and video, balloon, inputs, serial console, watchdog, RNG, …"""

from __future__ import annotations

import posixpath

from pykubevirt.api import pod_layout
from pykubevirt.api.json_lookup import get
from pykubevirt.launcher.converter import disks as disk_devices
from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.context import ConversionError, ConverterContext
from pykubevirt.launcher.converter.xml import Element, element, on_off, sub
from pykubevirt.launcher.host_firmware import TPM_PACKAGES

GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"
DOWNWARD_METRICS_CHANNEL = "org.github.vhostmd.1"
DOWNWARD_METRICS_SOCKET = "downwardmetrics-channel/downwardmetrics.sock"
VIDEO_HEADS = 1
VIDEO_VRAM_KIB = 16384
SERIAL_PORT = 0
FREE_PAGE_REPORTING_OFF_ANNOTATION = "kubevirt.io/free-page-reporting-disabled"
DISABLE_PCI_HOLE64_ANNOTATION = "kubevirt.io/disablePCIHole64"
SOUND_MODELS = ("ich9", "ac97")


def _uid_dir(vmi: v.Obj, ctx: ConverterContext) -> str:
    return posixpath.join(ctx.private_dir, str(get(vmi, "metadata", "uid") or ""))


def _check_unsupported(devs: v.Obj) -> None:
    # Each of these needs host resources (VFIO devices, a virtiofsd per filesystem) the launcher does not manage.
    for key, what in (("gpus", "GPUs"), ("hostDevices", "host devices"), ("filesystems", "filesystems (virtiofs)")):
        if devs.get(key):
            raise ConversionError(f"{what} are not supported")


def channels(vmi: v.Obj, ctx: ConverterContext) -> list[Element]:
    # The guest agent socket path is left to libvirt, which puts it under its own runtime directory.
    agent = element("channel", {"type": "unix"})
    sub(agent, "target", {"name": GUEST_AGENT_CHANNEL, "type": "virtio"})
    result = [agent]
    if v.devices(vmi).get("downwardMetrics") is not None:
        metrics = element("channel", {"type": "unix"})
        sub(metrics, "source", {"mode": "bind", "path": posixpath.join(ctx.private_dir, DOWNWARD_METRICS_SOCKET)})
        sub(metrics, "target", {"name": DOWNWARD_METRICS_CHANNEL, "type": "virtio"})
        result.append(metrics)
    return result


def _usb_needed(vmi: v.Obj) -> bool:
    devs = v.devices(vmi)
    if any(i.get("bus") in (None, "", "usb") for i in v.items(devs, "inputs")):
        return True
    if any(get(d, "disk", "bus") == "usb" for d in v.items(devs, "disks")):
        return True
    return devs.get("clientPassthrough") is not None


def _serial_console_enabled(vmi: v.Obj) -> bool:
    return v.flag(v.devices(vmi).get("autoattachSerialConsole"), True)


def controllers(vmi: v.Obj, plan: disk_devices.IOThreadPlan) -> list[Element]:
    devs = v.devices(vmi)
    model = v.virtio_model(vmi)
    result = [
        element("controller", {"type": "usb", "index": "0", "model": "qemu-xhci" if _usb_needed(vmi) else "none"})
    ]
    has_scsi_disk = any(disk_devices.bus_of(d) == "scsi" for d in v.items(devs, "disks"))
    if not devs.get("disableHotplug") or has_scsi_disk:
        # Without disableHotplug a SCSI controller is kept ready for hotplugged volumes.
        scsi = element("controller", {"type": "scsi", "index": "0", "model": model})
        thread = disk_devices.scsi_controller_thread(vmi, plan)
        if thread is not None:
            sub(scsi, "driver", {"iothread": thread, "queues": v.topology(vmi).vcpus})
        result.append(scsi)
    if str(v.mapping(vmi, "metadata", "annotations").get(DISABLE_PCI_HOLE64_ANNOTATION, "")).lower() == "true":
        root = element("controller", {"type": "pci", "index": "0", "model": "pcie-root"})
        sub(root, "pcihole64", {"unit": "KiB"}, text=0)
        result.append(root)
    if _serial_console_enabled(vmi):
        result.append(element("controller", {"type": "virtio-serial", "index": "0", "model": model}))
    return result


def graphics(vmi: v.Obj, ctx: ConverterContext) -> tuple[list[Element], list[Element]]:
    """(`<video>`, `<graphics>`): a VNC server on a unix socket virt-handler proxies, and a VGA card."""
    devs = v.devices(vmi)
    if not v.flag(devs.get("autoattachGraphicsDevice"), True):
        return [], []
    vnc = element("graphics", {"type": "vnc"})
    sub(vnc, "listen", {"type": "socket", "socket": posixpath.join(_uid_dir(vmi, ctx), pod_layout.VNC_SOCKET_NAME)})
    video = element("video")
    chosen = get(devs, "video", "type")
    if chosen:
        sub(video, "model", {"type": chosen, "heads": VIDEO_HEADS, "vram": VIDEO_VRAM_KIB})
    elif ctx.bochs_display_for_efi and v.is_efi(vmi):
        sub(video, "model", {"type": "bochs", "heads": VIDEO_HEADS})
    else:
        sub(video, "model", {"type": "vga", "heads": VIDEO_HEADS, "vram": VIDEO_VRAM_KIB})
    return [video], [vnc]


def memballoon(vmi: v.Obj, ctx: ConverterContext) -> Element:
    devs = v.devices(vmi)
    if not v.flag(devs.get("autoattachMemBalloon"), True):
        return element("memballoon", {"model": "none"})
    reporting = (
        ctx.free_page_reporting
        and not v.is_high_performance(vmi)
        and v.mapping(vmi, "metadata", "annotations").get(FREE_PAGE_REPORTING_OFF_ANNOTATION) != "true"
    )
    balloon = element("memballoon", {"model": v.virtio_model(vmi), "freePageReporting": on_off(reporting)})
    if ctx.mem_balloon_stats_period:
        sub(balloon, "stats", {"period": ctx.mem_balloon_stats_period})
    return balloon


def inputs(vmi: v.Obj) -> list[Element]:
    result = []
    for spec_input in v.items(v.devices(vmi), "inputs"):
        bus = spec_input.get("bus") or "usb"
        if bus not in ("virtio", "usb"):
            raise ConversionError(f"input contains unsupported bus {bus}")
        if spec_input.get("type") != "tablet":
            raise ConversionError(f"input contains unsupported type {spec_input.get('type')}")
        el = element("input", {"type": "tablet", "bus": bus, "model": "virtio" if bus == "virtio" else None})
        sub(el, "alias", {"name": f"ua-{spec_input.get('name')}"})
        result.append(el)
    return result


def serial_console(vmi: v.Obj, ctx: ConverterContext) -> tuple[list[Element], list[Element]]:
    """(`<serial>`, `<console>`): serial port 0 on a unix socket (virtctl console) plus a pty console on it."""
    if not _serial_console_enabled(vmi):
        return [], []
    socket = posixpath.join(_uid_dir(vmi, ctx), pod_layout.SERIAL_SOCKET_NAME)
    serial = element("serial", {"type": "unix"})
    sub(serial, "target", {"port": SERIAL_PORT})
    sub(serial, "source", {"mode": "bind", "path": socket})
    if v.flag(v.devices(vmi).get("logSerialConsole"), ctx.serial_log):
        sub(serial, "log", {"file": posixpath.join(_uid_dir(vmi, ctx), pod_layout.SERIAL_LOG_NAME), "append": "on"})
    console = element("console", {"type": "pty"})
    sub(console, "target", {"type": "serial", "port": SERIAL_PORT})
    return [serial], [console]


def watchdog(vmi: v.Obj) -> list[Element]:
    spec_watchdog = get(v.devices(vmi), "watchdog")
    if not isinstance(spec_watchdog, dict):
        return []
    esb = spec_watchdog.get("i6300esb")
    if not isinstance(esb, dict):
        raise ConversionError(f"watchdog {spec_watchdog.get('name')} can't be mapped, no watchdog type specified")
    el = element("watchdog", {"model": "i6300esb", "action": esb.get("action") or "reset"})
    sub(el, "alias", {"name": f"ua-{spec_watchdog.get('name')}"})
    return [el]


def rng(vmi: v.Obj) -> list[Element]:
    if get(v.devices(vmi), "rng") is None:
        return []
    el = element("rng", {"model": v.virtio_model(vmi)})
    sub(el, "backend", {"model": "random"}, text="/dev/urandom")
    return [el]


def panic_devices(vmi: v.Obj) -> list[Element]:
    return [element("panic", {"model": p.get("model") or None}) for p in v.items(v.devices(vmi), "panicDevices")]


def usb_redirects(vmi: v.Obj, ctx: ConverterContext) -> list[Element]:
    if v.devices(vmi).get("clientPassthrough") is None:
        return []
    result = []
    for slot in range(pod_layout.USB_REDIRECT_SLOTS):
        el = element("redirdev", {"type": "unix", "bus": "usb"})
        path = posixpath.join(_uid_dir(vmi, ctx), pod_layout.usbredir_socket_name(slot))
        sub(el, "source", {"mode": "bind", "path": path})
        result.append(el)
    return result


def sound(vmi: v.Obj) -> list[Element]:
    spec_sound = get(v.devices(vmi), "sound")
    if not isinstance(spec_sound, dict):
        return []
    model = spec_sound.get("model") or "ich9"
    if model not in SOUND_MODELS:
        raise ConversionError(f"invalid model: {model}")
    el = element("sound", {"model": model})
    sub(el, "alias", {"name": f"ua-{spec_sound.get('name')}"})
    return [el]


def tpm(vmi: v.Obj, ctx: ConverterContext) -> list[Element]:
    spec_tpm = get(v.devices(vmi), "tpm")
    if not isinstance(spec_tpm, dict) or not v.enabled(spec_tpm):
        return []
    if not ctx.tpm_emulator:
        # libvirt would only say "TPM version '2.0' is not supported".
        raise ConversionError(f"a TPM needs the swtpm emulator: install the {TPM_PACKAGES} packages on the node")
    persistent = bool(spec_tpm.get("persistent"))
    el = element("tpm", {"model": "tpm-crb" if persistent else "tpm-tis"})
    sub(el, "backend", {"type": "emulator", "version": "2.0", "persistent_state": "yes" if persistent else None})
    return [el]


def vsock(vmi: v.Obj) -> list[Element]:
    cid = get(vmi, "status", "VSOCKCID")
    if cid is None:
        return []
    el = element("vsock", {"model": "virtio-non-transitional"})
    sub(el, "cid", {"auto": "no", "address": int(cid)})
    return [el]


def build_devices(vmi: v.Obj, ctx: ConverterContext, plan: disk_devices.IOThreadPlan, nics: list[Element]) -> Element:
    """All devices, grouped by kind in KubeVirt's order (libvirt itself does not care about the order)."""
    devs = v.devices(vmi)
    _check_unsupported(devs)
    videos, vnc = graphics(vmi, ctx)
    serials, consoles = serial_console(vmi, ctx)
    devices = element("devices")
    groups: list[list[Element]] = [
        nics,
        channels(vmi, ctx),
        panic_devices(vmi),
        controllers(vmi, plan),
        videos,
        vnc,
        [memballoon(vmi, ctx)],
        disk_devices.build_disks(vmi, ctx, plan),
        inputs(vmi),
        serials,
        consoles,
        watchdog(vmi),
        rng(vmi),
        usb_redirects(vmi, ctx),
        sound(vmi),
        tpm(vmi, ctx),
        vsock(vmi),
    ]
    for group in groups:
        devices.extend(group)
    return devices
