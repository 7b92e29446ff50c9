"""Guest CPU and memory: `<memory>`, `<maxMemory>`, `<memoryBacking>`, `<cpu>`, `<vcpu>` and `<vcpus>`."""

from __future__ import annotations

from dataclasses import dataclass

from pykubevirt.api.json_lookup import get
from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.context import ConversionError, ConverterContext
from pykubevirt.launcher.converter.xml import Element, element, sub, yes_no

HOST_MODEL = "host-model"
HOST_PASSTHROUGH = "host-passthrough"
MEMFD_ANNOTATION = "kubevirt.io/memfd"
# libvirt 9.0 refuses `<maxMemory>` without at least one slot; KubeVirt (newer libvirt, virtio-mem) writes 0.
MAX_MEMORY_SLOTS = 1


@dataclass(frozen=True, slots=True)
class Memory:
    """Boot memory in bytes and, with hotplug configured, the maximum."""

    boot: int
    maximum: int | None


def memory(vmi: v.Obj) -> Memory:
    """memory.guest (else requests, else limits); maxGuest only when it differs from guest (hotplug)."""
    mem = v.mapping(v.domain(vmi), "memory")
    max_guest = mem.get("maxGuest")
    guest = mem.get("guest")
    if max_guest is None or (
        guest is not None and v.quantity(guest, "memory.guest") == v.quantity(max_guest, "maxGuest")
    ):
        amount = v.guest_memory(vmi)
        if amount is None:
            raise ConversionError("no memory requested: set memory.guest, resources.requests.memory or limits.memory")
        return Memory(boot=v.to_bytes(amount, "memory"), maximum=None)
    if guest is None:
        raise ConversionError("memory.maxGuest needs memory.guest")
    return Memory(boot=v.to_bytes(guest, "memory.guest"), maximum=v.to_bytes(max_guest, "memory.maxGuest"))


def memfd_required(vmi: v.Obj) -> bool:
    """Hugepages are backed by memfd unless the VMI opts out (virtiofs and passt are not supported here)."""
    if get(v.domain(vmi), "memory", "hugepages") is None:
        return False
    return v.mapping(vmi, "metadata", "annotations").get(MEMFD_ANNOTATION) != "false"


def memory_backing(vmi: v.Obj) -> Element | None:
    if get(v.domain(vmi), "memory", "hugepages") is None:
        return None
    backing = element("memoryBacking")
    # KubeVirt leaves the page size to the host default unless it pins NUMA nodes (not supported here).
    sub(backing, "hugepages")
    if memfd_required(vmi):
        sub(backing, "source", {"type": "memfd"})
    return backing


def _check_unsupported(cpu: v.Obj, ctx: ConverterContext) -> None:
    # These need the pod's CPU set and the host NUMA topology, which a pure conversion does not have.
    if cpu.get("dedicatedCpuPlacement") and not ctx.pinned_cpus:
        raise ConversionError(
            "dedicatedCpuPlacement needs the launcher's exclusive CPUs: a node agent with --cpu-manager-policy static"
        )
    if cpu.get("realtime") is not None:
        raise ConversionError("cpu.realtime is not supported: it needs dedicated CPU placement")
    if get(cpu, "numa", "guestMappingPassthrough") is not None:
        raise ConversionError("cpu.numa.guestMappingPassthrough is not supported: it needs the host NUMA topology")


def cpu_mode_and_model(vmi: v.Obj, ctx: ConverterContext) -> tuple[str, str | None]:
    model = str(v.mapping(v.domain(vmi), "cpu").get("model") or "")
    if model == HOST_PASSTHROUGH and ctx.use_emulation:
        # TCG cannot pass the host CPU through (libvirt: "CPU mode 'host-passthrough' … is not supported by
        # hypervisor"); KubeVirt would keep it and fail. "maximum" (-cpu max) is the closest TCG offers.
        return "maximum", None
    if model in ("", HOST_MODEL):
        # host-model works under TCG too: libvirt expands it from what QEMU's TCG reports (verified, libvirt 9.0).
        return HOST_MODEL, None
    if model == HOST_PASSTHROUGH:
        return HOST_PASSTHROUGH, None
    return "custom", model


def build_cputune(vmi: v.Obj, ctx: ConverterContext) -> Element | None:
    """Dedicated CPUs: vCPU i on the pod's i-th exclusive CPU (KubeVirt's vcpupin from the launcher's cpuset)."""
    if not v.mapping(v.domain(vmi), "cpu").get("dedicatedCpuPlacement"):
        return None
    count = v.topology(vmi).vcpus
    if len(ctx.pinned_cpus) < count:
        raise ConversionError(f"not enough exclusive CPUs for {count} vCPUs: the pod has {len(ctx.pinned_cpus)}")
    cputune = element("cputune")
    for vcpu, host_cpu in enumerate(sorted(ctx.pinned_cpus)[:count]):
        sub(cputune, "vcpupin", {"vcpu": vcpu, "cpuset": host_cpu})
    return cputune


def build_cpu(vmi: v.Obj, ctx: ConverterContext, numa_cell_kib: int | None) -> tuple[Element, Element, Element | None]:
    """The `<cpu>`, `<vcpu>` and (with maxSockets) `<vcpus>` elements."""
    cpu_spec = v.mapping(v.domain(vmi), "cpu")
    _check_unsupported(cpu_spec, ctx)
    topo = v.topology(vmi)
    count = topo.vcpus
    sockets = topo.sockets
    vcpus_el: Element | None = None
    max_sockets = int(cpu_spec.get("maxSockets") or 0)
    if max_sockets:
        # CPU hotplug: the topology spans maxSockets; vCPUs beyond the requested ones start disabled, and
        # every vCPU outside the first socket can be unplugged.
        enabled_count, first_socket = count, topo.cores * topo.threads
        sockets = max_sockets
        count = sockets * topo.cores * topo.threads
        vcpus_el = element("vcpus")
        for vcpu_id in range(count):
            enabled, pluggable = yes_no(vcpu_id < enabled_count), yes_no(vcpu_id >= first_socket)
            sub(vcpus_el, "vcpu", {"id": vcpu_id, "enabled": enabled, "hotpluggable": pluggable})

    mode, model = cpu_mode_and_model(vmi, ctx)
    cpu_el = element("cpu", {"mode": mode})
    if model is not None:
        sub(cpu_el, "model", text=model)
    names = set()
    for feature in v.items(cpu_spec, "features"):
        names.add(feature.get("name"))
        sub(cpu_el, "feature", {"name": feature.get("name"), "policy": feature.get("policy") or None})
    if mode == "custom" and "mpx" not in names:
        # libvirt's cpu_map still lists the deprecated mpx in many models, which QEMU no longer offers.
        sub(cpu_el, "feature", {"name": "mpx", "policy": "disable"})
    sub(cpu_el, "topology", {"sockets": sockets, "cores": topo.cores, "threads": topo.threads})
    if numa_cell_kib is not None and get(cpu_spec, "numa") is None:
        numa = sub(cpu_el, "numa")
        sub(numa, "cell", {"id": "0", "cpus": f"0-{count - 1}", "memory": numa_cell_kib, "unit": "KiB"})
    vcpu_el = element("vcpu", {"placement": "static"}, text=count)
    return cpu_el, vcpu_el, vcpus_el
