"""Guest memory hotplug on the running domain: a virtio-mem device whose requested size follows `memory.guest`.

Upstream: pkg/liveupdate/memory/memory.go (BuildMemoryDevice) and pkg/virt-launcher/virtwrap/manager.go
(UpdateGuestMemory). The domain starts with `<maxMemory>` = maxGuest and boot memory = guest; the first hotplug
attaches a virtio-mem device spanning maxGuest - guestAtBoot on NUMA node 0, later ones change its requested size.
The guest's virtio_mem driver then onlines (or offlines) memory blocks up to the requested size.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import libvirt

from pykubevirt.api.json_lookup import get
from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.xml import element, sub
from pykubevirt.launcher.domain_manager import DomainManager

# QEMU's recommended block size: a power of two, at least a transparent huge page (2 MiB on x86_64).
BLOCK_ALIGNMENT = 0x200000
# With 1Gi huge pages a block must hold whole pages.
BLOCK_ALIGNMENT_1G_HUGEPAGES = 0x40000000


def block_size(vmi: v.Obj) -> int:
    if get(v.domain(vmi), "memory", "hugepages", "pageSize") == "1Gi":
        return BLOCK_ALIGNMENT_1G_HUGEPAGES
    return BLOCK_ALIGNMENT


def device_sizes(vmi: v.Obj) -> tuple[int, int]:
    """(size, requested) in bytes: maxGuest and guest, each less the memory the guest booted with."""
    memory = v.mapping(v.domain(vmi), "memory")
    at_boot = get(vmi, "status", "memory", "guestAtBoot")
    if memory.get("maxGuest") is None or memory.get("guest") is None or at_boot is None:
        raise ValueError("memory hotplug needs memory.guest, memory.maxGuest and status.memory.guestAtBoot")
    boot = v.to_bytes(at_boot, "guestAtBoot")
    return v.to_bytes(memory["maxGuest"], "maxGuest") - boot, v.to_bytes(memory["guest"], "guest") - boot


def build_virtio_mem(vmi: v.Obj) -> str:
    """The `<memory model='virtio-mem'>` device for the VMI as KubeVirt builds it."""
    size, requested = device_sizes(vmi)
    device = element("memory", {"model": "virtio-mem"})
    target = sub(device, "target")
    sub(target, "size", {"unit": "b"}, text=size)
    sub(target, "node", text=0)
    sub(target, "block", {"unit": "b"}, text=block_size(vmi))
    sub(target, "requested", {"unit": "b"}, text=requested)
    return ET.tostring(device, encoding="unicode")


def with_requested(device_xml: str, requested: int) -> str:
    """The domain's virtio-mem device (as libvirt reports it) with a new requested size."""
    device = ET.fromstring(device_xml)
    target = device.find("target")
    node = target.find("requested") if target is not None else None
    if target is None or node is None:
        raise ValueError("the virtio-mem device has no requested size")
    node.text, node.attrib["unit"] = str(requested), "b"
    # `current` is what the guest has plugged so far: libvirt reports it and refuses it in an update.
    current = target.find("current")
    if current is not None:
        target.remove(current)
    return ET.tostring(device, encoding="unicode")


def virtio_mem_device(domain_xml: str) -> str | None:
    """The domain's virtio-mem device, or None before the first memory hotplug attached one."""
    for device in ET.fromstring(domain_xml).iterfind("devices/memory"):
        if device.get("model") == "virtio-mem":
            return ET.tostring(device, encoding="unicode")
    return None


async def sync_memory(domain: DomainManager, vmi: v.Obj) -> int:
    """Resize the guest's virtio-mem device to the VMI's guest memory (attached on first use); returns bytes asked."""
    existing = virtio_mem_device(await domain.xml())
    _, requested = device_sizes(vmi)

    def apply(d: Any) -> None:
        if existing is not None:
            d.updateDeviceFlags(with_requested(existing, requested), libvirt.VIR_DOMAIN_AFFECT_LIVE)
        else:
            config = libvirt.VIR_DOMAIN_AFFECT_CONFIG if d.isPersistent() else 0
            d.attachDeviceFlags(build_virtio_mem(vmi), libvirt.VIR_DOMAIN_AFFECT_LIVE | config)

    if not await domain.act(apply):
        raise RuntimeError("the domain is not running; its memory cannot change")
    return requested
