"""The virt-launcher compute container's resources: memory overhead, CPU requests, device limits, and pod QoS."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.quantity import MI, Quantity, QuantityError, QuantityFormat
from pykubevirt.config.cluster_config import ClusterConfig

# Device-plugin resources virt-launcher asks for (limits only).
DEVICE_PREFIX = "devices.kubevirt.io"
KVM_DEVICE = DEVICE_PREFIX + "/kvm"
TUN_DEVICE = DEVICE_PREFIX + "/tun"
VHOST_NET_DEVICE = DEVICE_PREFIX + "/vhost-net"
VHOST_VSOCK_DEVICE = DEVICE_PREFIX + "/vhost-vsock"
PR_HELPER_DEVICE = DEVICE_PREFIX + "/pr-helper"

EPHEMERAL_STORAGE_OVERHEAD = "50M"
EMULATOR_THREAD_EVEN_PARITY_ANNOTATION = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"

# `ps` RSS of the launcher's processes: virt-launcher-monitor 25, virt-launcher 100, virtlogd 25, virtqemud 40, qemu 50.
_PROCESS_OVERHEAD_MI = (25, 100, 25, 40, 50)
_VCPU_OVERHEAD = 8 * MI
_IOTHREAD_OVERHEAD = 8 * MI
_VIDEO_OVERHEAD = 32 * MI
_ARM64_PFLASH_OVERHEAD = 128 * MI
_VFIO_OVERHEAD = 1024 * MI
_DOWNWARD_METRICS_OVERHEAD = 1 * MI
_PROBE_OVERHEAD = 10 * MI
_PROBE_BINARY_OVERHEAD = 100 * MI
_SEV_OVERHEAD = 256 * MI
_TPM_OVERHEAD = 53 * MI
_DEDICATED_OVERHEAD = 100 * MI


def _bin(value: int) -> Quantity:
    return Quantity(value, QuantityFormat.BINARY_SI)


def _add(left: Quantity | None, right: Quantity) -> Quantity:
    """Quantity.Add: a zero (or absent) left operand takes the right operand's format."""
    if left is None or left.is_zero():
        return Quantity((left.value if left else 0) + right.value, right.format)
    return left + right


def _sub(left: Quantity, right: Quantity) -> Quantity:
    if left.is_zero():
        return Quantity(left.value - right.value, right.format)
    return left - right


def _resource_list(values: Mapping[str, Any] | None) -> dict[str, Quantity]:
    return {name: Quantity.parse(value) for name, value in (values or {}).items()}


def _domain(vmi: Mapping[str, Any]) -> Mapping[str, Any]:
    return (vmi.get("spec") or {}).get("domain") or {}


def _vmi_resources(vmi: Mapping[str, Any]) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    resources = _domain(vmi).get("resources") or {}
    return _resource_list(resources.get("requests")), _resource_list(resources.get("limits"))


def topology_vcpus(cpu: Mapping[str, Any]) -> int:
    """sockets × cores × threads counting only the non-zero ones (0 when none is set)."""
    count = 0
    for factor in (cpu.get("cores") or 0, cpu.get("sockets") or 0, cpu.get("threads") or 0):
        if factor:
            count = factor if count == 0 else count * factor
    return int(count)


def vcpus(vmi: Mapping[str, Any]) -> int:
    """The guest's vCPUs: the CPU topology if set, else ceil(limits.cpu) or ceil(requests.cpu); at least 1."""
    cpu = _domain(vmi).get("cpu")
    if cpu is not None:
        count = topology_vcpus(cpu)
    else:
        requests, limits = _vmi_resources(vmi)
        source = limits.get("cpu") or requests.get("cpu")
        count = source.ceil_int() if source is not None else 0
    return max(count, 1)


def is_cpu_dedicated(vmi: Mapping[str, Any]) -> bool:
    return bool((_domain(vmi).get("cpu") or {}).get("dedicatedCpuPlacement"))


def wants_guaranteed_qos(vmi: Mapping[str, Any]) -> bool:
    """Requests equal limits for CPU and memory (a memory limit without a request counts as equal)."""
    requests, limits = _vmi_resources(vmi)
    zero = Quantity(0)
    req_mem, lim_mem = requests.get("memory", zero), limits.get("memory", zero)
    req_cpu, lim_cpu = requests.get("cpu", zero), limits.get("cpu", zero)
    memory_wants = (req_mem.is_zero() and not lim_mem.is_zero()) or (not req_mem.is_zero() and req_mem == lim_mem)
    return memory_wants and not req_cpu.is_zero() and req_cpu == lim_cpu


def _has_vfio(vmi: Mapping[str, Any]) -> bool:
    devices = _domain(vmi).get("devices") or {}
    if devices.get("hostDevices") or devices.get("gpus"):
        return True
    return any("sriov" in iface for iface in devices.get("interfaces") or [])


def _has_exec_probe(probe: Mapping[str, Any] | None) -> bool:
    return probe is not None and probe.get("exec") is not None


def _is_sev(vmi: Mapping[str, Any]) -> bool:
    launch_security = _domain(vmi).get("launchSecurity")
    return launch_security is not None and (
        launch_security.get("sev") is not None or launch_security.get("snp") is not None
    )


def _has_tpm(vmi: Mapping[str, Any]) -> bool:
    tpm = (_domain(vmi).get("devices") or {}).get("tpm")
    return tpm is not None and tpm.get("enabled", True) is not False


def _parse_ratio(text: str) -> float | None:
    """strconv.ParseFloat's accepted inputs, closely enough: no surrounding blanks, no digit separators."""
    if text != text.strip() or "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def multiply_memory(memory: Quantity, ratio: float) -> Quantity:
    """Scale an overhead by `ratio` on the kilobyte scale, truncating the addition like upstream's int64 cast."""
    kilo = math.ceil(memory.value / 1000)
    addition = int(float(kilo) * (ratio - 1.0))
    return _add(memory, Quantity(addition * 1000, QuantityFormat.DECIMAL_SI))


def memory_overhead(vmi: Mapping[str, Any], config: ClusterConfig, *, additional_ratio: str | None = None) -> Quantity:
    """What KubeVirt adds to the guest's memory for QEMU, libvirt and the launcher.

    Upstream: pkg/hypervisor/kvm/hypervisorbackend.go: GetMemoryOverhead.
    """
    domain = _domain(vmi)
    spec = vmi.get("spec") or {}
    devices = domain.get("devices") or {}
    requests, _ = _vmi_resources(vmi)
    overhead = Quantity(0, QuantityFormat.DECIMAL_SI)

    # Page tables: one byte per 512 bytes of the VMI's memory *request* (not the guest size), on a kB-rounded value.
    requested = requests.get("memory", Quantity(0))
    pagetables = math.ceil(requested.value / 1000) * 1000 // 512 if requested.value > 0 else 0
    overhead = _add(overhead, Quantity(pagetables, QuantityFormat.DECIMAL_SI))
    for mebibytes in _PROCESS_OVERHEAD_MI:
        overhead = _add(overhead, _bin(mebibytes * MI))
    overhead = _add(overhead, _bin(_VCPU_OVERHEAD * vcpus(vmi)))
    overhead = _add(overhead, _bin(_IOTHREAD_OVERHEAD))
    if devices.get("autoattachGraphicsDevice") is not False:
        overhead = _add(overhead, _bin(_VIDEO_OVERHEAD))
    if (spec.get("architecture") or config.architecture) == "arm64":
        overhead = _add(overhead, _bin(_ARM64_PFLASH_OVERHEAD))
    if _has_vfio(vmi):
        overhead = _add(overhead, _bin(_VFIO_OVERHEAD))
    if any("downwardMetrics" in volume for volume in spec.get("volumes") or []):
        overhead = _add(overhead, _bin(_DOWNWARD_METRICS_OVERHEAD))
    liveness, readiness = _has_exec_probe(spec.get("livenessProbe")), _has_exec_probe(spec.get("readinessProbe"))
    for present in (liveness, readiness):
        if present:
            overhead = _add(overhead, _bin(_PROBE_OVERHEAD))
    if liveness or readiness:
        overhead = _add(overhead, _bin(_PROBE_BINARY_OVERHEAD))
    if _is_sev(vmi):
        overhead = _add(overhead, _bin(_SEV_OVERHEAD))
    if _has_tpm(vmi):
        overhead = _add(overhead, _bin(_TPM_OVERHEAD))
    if is_cpu_dedicated(vmi) or wants_guaranteed_qos(vmi):
        overhead = _add(overhead, _bin(_DEDICATED_OVERHEAD))
    added = ((domain.get("memory") or {}).get("reservedOverhead") or {}).get("addedOverhead")
    if added is not None:
        overhead = _add(overhead, Quantity.parse(added))
    if additional_ratio:
        ratio = _parse_ratio(additional_ratio)
        if ratio is not None:
            overhead = multiply_memory(overhead, ratio)
    return overhead


def _go_float(value: float) -> str:
    """fmt's %g for the CPU fractions rendered here (shortest digits, no trailing `.0`)."""
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _iothread_cpus(vmi: Mapping[str, Any]) -> int:
    return int((_domain(vmi).get("ioThreads") or {}).get("supplementalPoolThreadCount") or 0)


class _Renderer:
    """The user's requests/limits plus what KubeVirt calculates; the user's values win when both exist."""

    def __init__(self, vmi: Mapping[str, Any]) -> None:
        self.vm_requests, self.vm_limits = _vmi_resources(vmi)
        self.calc_requests: dict[str, Quantity] = {}
        self.calc_limits: dict[str, Quantity] = {}

    def requests(self) -> dict[str, Quantity]:
        return {**self.calc_requests, **self.vm_requests}

    def limits(self) -> dict[str, Quantity]:
        return {**self.calc_limits, **self.vm_limits}

    def bump(self, name: str) -> None:
        """Request one more of a device-plugin resource, in both requests and limits."""
        requests, limits = self.requests(), self.limits()
        for merged in (requests, limits):
            merged[name] = _add(merged.get(name), Quantity(1))
        self.calc_requests.update(requests)
        self.calc_limits.update(limits)


def _memory_requests(rr: _Renderer, memory: Mapping[str, Any], overcommit: int) -> None:
    limit, request = rr.vm_limits.get("memory"), rr.vm_requests.get("memory")
    if limit is not None and not limit.is_zero() and (request is None or request.is_zero()):
        rr.vm_requests["memory"] = limit
    if "memory" in rr.vm_requests:
        return
    size: Quantity | None = None
    if memory.get("guest") is not None:
        size = Quantity.parse(memory["guest"])
    elif memory.get("hugepages") is not None:
        try:
            size = Quantity.parse(memory["hugepages"].get("pageSize", ""))
        except QuantityError:
            size = None
    if size is not None and size.ceil_int() > 0:
        if overcommit == 100:
            rr.vm_requests["memory"] = size
        else:
            rr.vm_requests["memory"] = Quantity(size.ceil_int() * 100 // overcommit, size.format)


def _cpu_pinning(rr: _Renderer, vmi: Mapping[str, Any]) -> None:
    domain = _domain(vmi)
    cpu = domain.get("cpu") or {}
    count, iothreads = topology_vcpus(cpu), _iothread_cpus(vmi)
    if count:
        rr.vm_limits["cpu"] = _bin(count + iothreads)
        rr.vm_requests["cpu"] = _bin(count + iothreads)
    else:
        for resources in (rr.vm_limits, rr.vm_requests):
            if "cpu" in resources:
                resources["cpu"] = _add(resources["cpu"], _bin(iothreads))
    if cpu.get("isolateEmulatorThread"):
        additional = iothreads if domain.get("ioThreadsPolicy") == "supplementalPool" else 0
        annotations = (vmi.get("metadata") or {}).get("annotations") or {}
        limit = rr.vm_limits.get("cpu", Quantity(0))
        emulator = 1
        # Upstream completes to an even count so SMT siblings are not split between VMs.
        if EMULATOR_THREAD_EVEN_PARITY_ANNOTATION in annotations and (limit.ceil_int() + additional) % 2 == 0:
            emulator = 2
        rr.vm_limits["cpu"] = _add(limit, _bin(emulator))
        if "cpu" in rr.vm_requests:
            rr.vm_requests["cpu"] = _add(rr.vm_requests["cpu"], _bin(emulator))
    if "memory" in rr.vm_requests:
        rr.vm_limits["memory"] = rr.vm_requests["memory"]


def _shared_cpu(rr: _Renderer, vmi: Mapping[str, Any], ratio: int, with_limits: bool) -> None:
    cpu = _domain(vmi).get("cpu")
    total = (1 if cpu is None else topology_vcpus(cpu)) + _iothread_cpus(vmi)
    if total == 0 or ratio <= 0:
        return
    value = total / ratio
    text = _go_float(value) if value >= 1 else _go_float(value * 1000) + "m"
    rr.calc_requests["cpu"] = Quantity.parse(text)
    if with_limits:
        rr.calc_limits["cpu"] = Quantity.parse(str(total))


def _hugepages(rr: _Renderer, memory: Mapping[str, Any], overhead: Quantity) -> None:
    name = "hugepages-" + str(memory["hugepages"].get("pageSize", ""))
    guest = Quantity.parse(memory["guest"]) if memory.get("guest") is not None else None
    request = rr.vm_requests.get("memory", Quantity(0))
    limit = rr.vm_limits.get("memory", Quantity(0))
    pages = guest if guest is not None and request.ceil_int() > guest.ceil_int() else request
    rr.calc_requests[name] = pages
    rr.calc_limits[name] = pages
    # Only the part of the request beyond the guest (plus the overhead) is regular memory.
    request_diff = limit_diff = Quantity(0, QuantityFormat.DECIMAL_SI)
    if guest is not None:
        if request.ceil_int() > guest.ceil_int():
            request_diff = _sub(_add(request_diff, request), guest)
        if limit.ceil_int() > guest.ceil_int():
            limit_diff = _sub(_add(limit_diff, limit), guest)
    rr.vm_requests["memory"] = _add(request_diff, overhead)
    if "memory" in rr.vm_limits:
        rr.vm_limits["memory"] = _add(limit_diff, overhead)


def _memory_overhead(rr: _Renderer, vmi: Mapping[str, Any], overhead: Quantity) -> None:
    resources = _domain(vmi).get("resources") or {}
    request = rr.vm_requests.get("memory")
    if not resources.get("overcommitGuestOverhead"):
        request = _add(request, overhead)
    rr.vm_requests["memory"] = request if request is not None else Quantity(0)
    if "memory" in rr.vm_limits:
        rr.vm_limits["memory"] = _add(rr.vm_limits["memory"], overhead)


def _needs_tun(devices: Mapping[str, Any]) -> bool:
    return bool(devices.get("interfaces")) or devices.get("autoattachPodInterface") is not False


def _has_virtio_nic(devices: Mapping[str, Any]) -> bool:
    return any(iface.get("model", "") in ("", "virtio") for iface in devices.get("interfaces") or [])


def _virtualization_limits(vmi: Mapping[str, Any], use_emulation: bool) -> dict[str, Quantity]:
    devices = _domain(vmi).get("devices") or {}
    limits: dict[str, Quantity] = {}
    if _needs_tun(devices):
        limits[TUN_DEVICE] = Quantity(1)
    # With emulation allowed, upstream withholds /dev/vhost-net too and libvirt falls back to QEMU's userland NIC.
    if _has_virtio_nic(devices) and not use_emulation:
        limits[VHOST_NET_DEVICE] = Quantity(1)
    if not use_emulation:
        limits[KVM_DEVICE] = Quantity(1)
    if devices.get("autoattachVSOCK"):
        limits[VHOST_VSOCK_DEVICE] = Quantity(1)
    return limits


def _render(resources: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(resources[name]) for name in sorted(resources)}


def launcher_resources(
    vmi: Mapping[str, Any],
    config: ClusterConfig,
    *,
    use_emulation: bool = True,
    overhead: Quantity | None = None,
    additional_overhead_ratio: str | None = None,
    auto_cpu_limits: bool = False,
    auto_memory_limits_ratio: float | None = None,
) -> dict[str, dict[str, str]]:
    """The compute container's `resources` ({"requests", "limits"}; empty ones omitted) as upstream renders it."""
    if overhead is None:
        overhead = memory_overhead(vmi, config, additional_ratio=additional_overhead_ratio)
    domain = _domain(vmi)
    memory = domain.get("memory") or {}
    devices = domain.get("devices") or {}
    rr = _Renderer(vmi)
    storage = Quantity.parse(EPHEMERAL_STORAGE_OVERHEAD)
    rr.vm_requests["ephemeral-storage"] = _add(rr.vm_requests.get("ephemeral-storage"), storage)
    if "ephemeral-storage" in rr.vm_limits:
        rr.vm_limits["ephemeral-storage"] = _add(rr.vm_limits["ephemeral-storage"], storage)
    rr.vm_limits.update(_virtualization_limits(vmi, use_emulation))

    # Upstream's rule order: overcommit first so the overhead itself is never overcommitted.
    if rr.vm_requests.get("memory", Quantity(0)).is_zero():
        _memory_requests(rr, memory, config.memory_overcommit)
    if is_cpu_dedicated(vmi):
        _cpu_pinning(rr, vmi)
    else:
        with_cpu_limits = auto_cpu_limits and "cpu" not in rr.vm_limits
        _shared_cpu(rr, vmi, config.cpu_allocation_ratio, with_cpu_limits)
    if memory.get("hugepages") is not None:
        _hugepages(rr, memory, overhead)
    else:
        _memory_overhead(rr, vmi, overhead)
    if auto_memory_limits_ratio is not None and "memory" not in _vmi_resources(vmi)[1]:
        request = rr.vm_requests.get("memory", Quantity(0))
        rr.calc_limits["memory"] = Quantity(int(float(request.ceil_int()) * auto_memory_limits_ratio), request.format)
    for device in [*(devices.get("gpus") or []), *(devices.get("hostDevices") or [])]:
        if device.get("deviceName") and device.get("claimRequest") is None:
            rr.bump(device["deviceName"])
    if any((disk.get("lun") or {}).get("reservation") for disk in devices.get("disks") or []):
        rr.bump(PR_HELPER_DEVICE)

    rendered: dict[str, dict[str, str]] = {}
    if requests := rr.requests():
        rendered["requests"] = _render(requests)
    if limits := rr.limits():
        rendered["limits"] = _render(limits)
    return rendered


def support_container_resources(guaranteed: bool, *, container_disk: bool) -> dict[str, dict[str, str]]:
    """Resources of a containerDisk container, or of the init container copying its binary (`container_disk=False`)."""
    limits = {"cpu": "10m" if container_disk or guaranteed else "100m", "memory": "40M"}
    requests = {"cpu": "1m" if container_disk else "10m", "memory": "1M"}
    if guaranteed:
        requests.update(limits)  # dedicated-CPU / Guaranteed pods need every container at requests == limits
    if container_disk:
        requests["ephemeral-storage"] = EPHEMERAL_STORAGE_OVERHEAD
    return {"requests": dict(sorted(requests.items())), "limits": limits}


def console_log_resources(guaranteed: bool) -> dict[str, dict[str, str]]:
    """Resources of the guest-console-log container (upstream's resourcesForSerialConsoleLogContainer)."""
    limits = {"cpu": "15m", "memory": "60M"}
    requests = dict(limits) if guaranteed else {"cpu": "5m", "memory": "35M"}
    return {"requests": requests, "limits": limits}
