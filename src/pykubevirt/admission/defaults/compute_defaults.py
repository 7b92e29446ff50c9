"""CPU, memory, machine and resource defaults, including the LiveUpdate hotplug headroom (pkg/defaults/defaults.go)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from pykubevirt.admission.defaults.common import (
    ARCH_AMD64,
    ARCH_ARM64,
    ARCH_S390X,
    as_dict,
    canonical_or_same,
    is_zero,
    obj,
)
from pykubevirt.admission.validation.compute import live_update_memory_error
from pykubevirt.api.json_lookup import get, parse_quantity
from pykubevirt.api.quantity import Quantity, QuantityFormat
from pykubevirt.config.cluster_config import ClusterConfig

# virt-config's per-architecture machine types; any other architecture gets the amd64 one.
DEFAULT_MACHINE_TYPES = {ARCH_AMD64: "q35", ARCH_ARM64: "virt", ARCH_S390X: "s390-ccw-virtio"}
DEFAULT_CPU_MODEL = "host-model"
ARM64_CPU_MODEL = "host-passthrough"
DEFAULT_CPU_REQUEST = "100m"
DEFAULT_EVICTION_STRATEGY = "None"
ROLLOUT_LIVE_UPDATE = "LiveUpdate"

# Machine types differ in their vCPU ceiling; KubeVirt caps the hotplug headroom at 512 vCPUs for all.
MAX_HOTPLUG_VCPUS = 512


def _uint(value: Any) -> int:
    """An unsigned field as Go reads it: absent, null or non-integer counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def set_default_architecture(spec: dict[str, Any], config: ClusterConfig) -> None:
    if not spec.get("architecture"):
        spec["architecture"] = config.architecture


def set_default_machine_type(spec: dict[str, Any]) -> None:
    domain = obj(spec, "domain")
    machine = obj(domain, "machine") if domain is not None else None
    if machine is not None and not machine.get("type"):
        machine["type"] = DEFAULT_MACHINE_TYPES.get(
            str(spec.get("architecture") or ""), DEFAULT_MACHINE_TYPES[ARCH_AMD64]
        )


def set_default_resource_requests(spec: dict[str, Any], config: ClusterConfig) -> None:
    """Copy a lone CPU limit into the request; add the cluster's cpuRequest only when it differs from 100m."""
    domain = obj(spec, "domain")
    resources = obj(domain, "resources") if domain is not None else None
    if resources is None:
        return
    limits = as_dict(resources.get("limits"))
    requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else None
    if not is_zero(limits.get("cpu")) and is_zero((requests or {}).get("cpu")):
        requests = obj(resources, "requests")
        if requests is not None:
            requests["cpu"] = canonical_or_same(limits["cpu"])

    cluster_request = parse_quantity(config.cpu_request) if config.cpu_request is not None else None
    if cluster_request is None or cluster_request == Quantity.parse(DEFAULT_CPU_REQUEST):
        return
    if isinstance(requests, dict) and "cpu" in requests:
        return
    if get(domain, "cpu", "dedicatedCpuPlacement") is True:
        return
    requests = obj(resources, "requests")
    if requests is not None:
        requests["cpu"] = str(cluster_request)


def set_guest_memory(spec: dict[str, Any]) -> None:
    """memory.guest from requests.memory, else limits.memory, else the hugepage size."""
    domain = obj(spec, "domain")
    memory = obj(domain, "memory") if domain is not None else None
    if memory is None or memory.get("guest") is not None:
        return
    requests = get(domain, "resources", "requests")
    limits = get(domain, "resources", "limits")
    if isinstance(requests, dict) and not is_zero(requests.get("memory")):
        memory["guest"] = canonical_or_same(requests["memory"])
    elif isinstance(limits, dict) and not is_zero(limits.get("memory")):
        memory["guest"] = canonical_or_same(limits["memory"])
    elif isinstance(memory.get("hugepages"), dict):
        page_size = parse_quantity(memory["hugepages"].get("pageSize"))
        if page_size is not None:
            memory["guest"] = str(page_size)


def _cpu_count(resources: Any, kind: str) -> int | None:
    """ceil(resources.<kind>.cpu) when the key exists (even when zero), as the topology default reads it."""
    values = get(resources, kind)
    if not isinstance(values, dict) or "cpu" not in values:
        return None
    q = parse_quantity(values["cpu"])
    return q.ceil_int() if q is not None else None


def set_default_guest_cpu_topology(spec: dict[str, Any]) -> None:
    """With no sockets/cores/threads, put all vCPUs (limit, else request, else 1) into sockets."""
    domain = obj(spec, "domain")
    if domain is None:
        return
    cpu = domain.get("cpu")
    if isinstance(cpu, dict) and any(_uint(cpu.get(k)) for k in ("cores", "sockets", "threads")):
        return
    cpu = obj(domain, "cpu")
    if cpu is None:
        return
    # Sockets perform best for guests (rhbz#1653453), so the vCPU count goes there.
    resources = domain.get("resources")
    sockets = _cpu_count(resources, "limits")
    if sockets is None:
        sockets = _cpu_count(resources, "requests")
    cpu["sockets"] = 1 if sockets is None else sockets
    cpu["cores"] = 1
    cpu["threads"] = 1


def set_default_cpu_model(spec: dict[str, Any], config: ClusterConfig) -> None:
    domain = obj(spec, "domain")
    cpu = obj(domain, "cpu") if domain is not None else None
    if cpu is not None and not cpu.get("model"):
        cpu["model"] = config.cpu_model or DEFAULT_CPU_MODEL


def set_default_arm64_cpu_model(spec: dict[str, Any]) -> None:
    domain = obj(spec, "domain")
    cpu = obj(domain, "cpu") if domain is not None else None
    if cpu is not None and not cpu.get("model"):
        cpu["model"] = ARM64_CPU_MODEL


def set_default_eviction_strategy(spec: dict[str, Any], config: ClusterConfig) -> None:
    if spec.get("evictionStrategy") is None:
        spec["evictionStrategy"] = config.eviction_strategy or DEFAULT_EVICTION_STRATEGY


def set_guest_memory_status(vmi: dict[str, Any]) -> None:
    guest = get(vmi, "spec", "domain", "memory", "guest")
    status = obj(vmi, "status")
    if guest is None or status is None:
        return
    status["memory"] = {"guestAtBoot": guest, "guestCurrent": guest, "guestRequested": guest}


def set_current_cpu_topology_status(vmi: dict[str, Any]) -> None:
    cpu = get(vmi, "spec", "domain", "cpu")
    status = obj(vmi, "status")
    if not isinstance(cpu, dict) or status is None or status.get("currentCPUTopology") is not None:
        return
    # Zero counts are omitted, as the Go struct's omitempty tags do.
    status["currentCPUTopology"] = {k: cpu[k] for k in ("cores", "sockets", "threads") if _uint(cpu.get(k))}


def _setup_cpu_hotplug(cpu: dict[str, Any], config: ClusterConfig) -> None:
    if _uint(cpu.get("maxSockets")):
        return
    sockets, cores, threads = _uint(cpu.get("sockets")), _uint(cpu.get("cores")), _uint(cpu.get("threads"))
    max_sockets = config.max_cpu_sockets or 0
    if max_sockets and sockets > max_sockets:
        max_sockets = sockets
    if not max_sockets:
        max_sockets = sockets * config.max_hotplug_ratio
        if max_sockets * cores * threads > MAX_HOTPLUG_VCPUS:
            max_sockets = max(MAX_HOTPLUG_VCPUS // (cores * threads), sockets)
    if max_sockets:
        cpu["maxSockets"] = max_sockets


def _setup_memory_hotplug(spec: dict[str, Any], config: ClusterConfig) -> None:
    domain = obj(spec, "domain")
    memory = obj(domain, "memory") if domain is not None else None
    if memory is None or memory.get("maxGuest") is not None:
        return
    max_guest: Quantity | None = None
    if config.max_guest is not None:
        max_guest = parse_quantity(config.max_guest)
    else:
        guest = parse_quantity(memory.get("guest"))
        if guest is not None:
            max_guest = Quantity(Fraction(guest.ceil_int() * config.max_hotplug_ratio), QuantityFormat.BINARY_SI)
    if live_update_memory_error(spec, max_guest) is None and max_guest is not None:
        memory["maxGuest"] = str(max_guest)


def setup_hotplug(spec: dict[str, Any], config: ClusterConfig) -> None:
    """Headroom for CPU and memory hotplug when the rollout strategy is LiveUpdate (not on arm64)."""
    if spec.get("architecture") == ARCH_ARM64:
        return
    if (config.vm_rollout_strategy or ROLLOUT_LIVE_UPDATE) != ROLLOUT_LIVE_UPDATE:
        return
    cpu = get(spec, "domain", "cpu")
    if isinstance(cpu, dict):
        _setup_cpu_hotplug(cpu, config)
    _setup_memory_hotplug(spec, config)
