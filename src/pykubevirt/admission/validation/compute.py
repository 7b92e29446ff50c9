"""Compute: memory and CPU resources, hugepages, dedicated CPUs, NUMA, realtime, CPU features, hotplug limits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import int_value, is_true, resource, vcpus, zero
from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported, required
from pykubevirt.api.json_lookup import as_int, as_list, as_map, as_str, get, parse_quantity
from pykubevirt.api.quantity import Quantity

VALID_CPU_FEATURE_POLICIES = ("", "force", "require", "optional", "disable", "forbid")
VALID_IO_THREADS_POLICIES = ("shared", "auto", "supplementalPool")
# resource.ErrFormatWrong, printed when a hugepage size does not parse.
QUANTITY_FORMAT_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
HOTPLUG_BLOCK_ALIGNMENT = 0x200000
HOTPLUG_1G_HUGEPAGES_BLOCK_ALIGNMENT = 0x40000000
MIN_HOTPLUG_GUEST_MEMORY = 0x40000000
_ONE_M = Quantity.parse("1M")


def _milli(q: Quantity) -> int:
    """`Quantity.MilliValue()`: thousandths rounded away from zero."""
    return int_value(q * 1000)


def _cpu(spec: Mapping[str, Any]) -> dict[str, Any]:
    return as_map(get(spec, "domain", "cpu"))


def _guest(spec: Mapping[str, Any]) -> Quantity | None:
    return parse_quantity(get(spec, "domain", "memory", "guest"))


def validate_memory_requests(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    requests = resource(spec, "requests", "memory")
    path = field.child("domain", "resources", "requests", "memory")
    if int_value(requests) < 0:
        return [invalid(str(path), f"{path} '{requests}': must be greater than or equal to 0.")]
    if int_value(requests) > 0 and requests < _ONE_M:
        return [invalid(str(path), f"{path} '{requests}': must be greater than or equal to 1M.")]
    return []


def validate_memory_limits(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    requests, limits = resource(spec, "requests", "memory"), resource(spec, "limits", "memory")
    req_path = field.child("domain", "resources", "requests", "memory")
    lim_path = field.child("domain", "resources", "limits", "memory")
    if int_value(limits) < 0:
        causes.append(invalid(str(lim_path), f"{lim_path} '{limits}': must be greater than or equal to 0."))
    if int_value(limits) > 0 and int_value(requests) > int_value(limits):
        causes.append(invalid(str(req_path), f"{req_path} '{requests}' is greater than {lim_path} '{limits}'"))
    return causes


def validate_hugepages(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    hugepages = get(spec, "domain", "memory", "hugepages")
    if hugepages is None:
        return []
    page_size_text = as_str(get(hugepages, "pageSize"))
    page_path = field.child("domain", "memory", "hugepages", "pageSize")
    page_size = parse_quantity(page_size_text) if page_size_text else None
    if page_size is None:
        return [invalid(str(page_path), f"{page_path} '{page_size_text}': {QUANTITY_FORMAT_ERROR}")]
    requests = resource(spec, "requests", "memory")
    vm_memory = int_value(requests)
    if vm_memory == 0:
        vm_memory = int_value(_guest(spec) or zero())
    if vm_memory == 0:
        vm_memory = int_value(resource(spec, "limits", "memory"))
    page = int_value(page_size)
    req_path = field.child("domain", "resources", "requests", "memory")
    if vm_memory != 0 and vm_memory < page:
        return [
            invalid(
                str(req_path),
                f"{req_path} '{requests}' must be equal to or larger than page size {page_path} '{page_size_text}'",
            )
        ]
    if page != 0 and vm_memory % page != 0:
        return [
            invalid(
                str(req_path),
                f"{req_path} '{requests}' is not a multiple of the page size {page_path} '{page_size_text}'",
            )
        ]
    return []


def validate_guest_memory_limit(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    # With LiveUpdate the guest may grow past the launch-time limit, so upstream skips this check.
    if ctx.config.vm_rollout_strategy == "LiveUpdate":
        return []
    guest = _guest(spec)
    if guest is None:
        return []
    limits = resource(spec, "limits", "memory")
    if int_value(limits) < int_value(guest) and int_value(limits) != 0:
        guest_path = field.child("domain", "memory", "guest")
        lim_path = field.child("domain", "resources", "limits", "memory")
        return [
            invalid(
                str(guest_path),
                f"{guest_path} '{guest}' must be equal to or less than the memory limit {lim_path} '{limits}'",
            )
        ]
    return []


def validate_cpu_requests_and_limits(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """CPU request and limit not negative, request not above the limit."""
    causes: list[Cause] = []
    requests, limits = resource(spec, "requests", "cpu"), resource(spec, "limits", "cpu")
    req_path = field.child("domain", "resources", "requests", "cpu")
    lim_path = field.child("domain", "resources", "limits", "cpu")
    if _milli(requests) < 0:
        causes.append(invalid(str(req_path), f"{req_path} '{requests}': must be greater than or equal to 0."))
    if _milli(limits) < 0:
        causes.append(invalid(str(lim_path), f"{lim_path} '{limits}': must be greater than or equal to 0."))
    if _milli(limits) > 0 and _milli(requests) > _milli(limits):
        causes.append(invalid(str(req_path), f"{req_path} '{requests}' is greater than {lim_path} '{limits}'"))
    return causes


def validate_dedicated_cpus(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """validateCpuPinning: the checks that apply when dedicatedCpuPlacement is true."""
    cpu = _cpu(spec)
    if not is_true(cpu.get("dedicatedCpuPlacement")):
        return []
    causes: list[Cause] = []
    req_cpu, lim_cpu = resource(spec, "requests", "cpu"), resource(spec, "limits", "cpu")
    req_mem, lim_mem = resource(spec, "requests", "memory"), resource(spec, "limits", "memory")
    res = field.child("domain", "resources")
    dedicated_path = str(field.child("domain", "cpu", "dedicatedCpuPlacement"))
    cores_path = field.child("domain", "cpu", "cores")

    if _memory_missing(spec):
        causes.append(
            invalid(
                str(res.child("limits", "memory")),
                f"{res.child('requests', 'memory')}, {res.child('limits', 'memory')}, "
                f"{field.child('domain', 'memory', 'hugepages')} or {field.child('domain', 'memory', 'guest')} "
                "should be provided",
            )
        )
    if int_value(req_cpu) > 0 and int_value(req_cpu) * 1000 != _milli(req_cpu):
        causes.append(invalid(str(res.child("requests", "cpu")), "provided resources CPU requests must be an interger"))
    if int_value(lim_cpu) > 0 and int_value(lim_cpu) * 1000 != _milli(lim_cpu):
        causes.append(invalid(str(res.child("limits", "cpu")), "provided resources CPU limits must be an interger"))
    if int_value(req_mem) > 0 and int_value(lim_mem) > 0 and int_value(req_mem) != int_value(lim_mem):
        causes.append(
            invalid(
                str(res.child("requests", "memory")),
                f"{res.child('requests', 'memory')} must be equal to {res.child('limits', 'memory')}",
            )
        )
    req, lim, count = int_value(req_cpu), int_value(lim_cpu), vcpus(cpu)
    if req == 0 and lim == 0 and count == 0:
        causes.append(
            invalid(
                dedicated_path,
                f"either {res.child('requests', 'cpu')} or {res.child('limits', 'cpu')} or {cores_path} "
                "must be provided when DedicatedCPUPlacement is true ",
            )
        )
    if req > 0 and lim > 0 and req != lim:
        causes.append(
            invalid(
                dedicated_path,
                f"{res.child('requests', 'cpu')} or {res.child('limits', 'cpu')} "
                "must be equal when DedicatedCPUPlacement is true ",
            )
        )
    if (req > 0 or lim > 0) and count > 0 and req != count and lim != count:
        causes.append(
            invalid(
                dedicated_path,
                f"{res.child('requests', 'cpu')} or {res.child('limits', 'cpu')} must not be provided at the same "
                f"time with {cores_path} when DedicatedCPUPlacement is true ",
            )
        )
    threads = as_int(cpu.get("threads"))
    arch = as_str(spec.get("architecture")) or ctx.config.architecture
    if threads > 1 and arch == "arm64":
        causes.append(
            invalid(
                str(field.child("architecture")),
                f"threads must not be greater than 1 at {field.child('domain', 'cpu', 'threads')} (got {threads}) "
                f"when {field.child('architecture')} is arm64",
            )
        )
    if threads > 2:
        causes.append(
            invalid(
                dedicated_path,
                f"Not more than two threads must be provided at {field.child('domain', 'cpu', 'threads')} "
                f"(got {threads}) when DedicatedCPUPlacement is true",
            )
        )
    return causes


def _memory_missing(spec: Mapping[str, Any]) -> bool:
    """validateMemoryIsProvided's negation: no memory limit, request, hugepages or guest memory."""
    if not resource(spec, "limits", "memory").is_zero() or not resource(spec, "requests", "memory").is_zero():
        return False
    memory = get(spec, "domain", "memory")
    if memory is None:
        return True
    if get(memory, "hugepages") is not None:
        return False
    guest = _guest(spec)
    return guest is None or guest.is_zero()


def validate_numa(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    cpu = _cpu(spec)
    if get(cpu, "numa", "guestMappingPassthrough") is None:
        return []
    causes: list[Cause] = []
    numa_path = field.child("domain", "cpu", "numa", "guestMappingPassthrough")
    if not ctx.config.gate_enabled("NUMA"):
        causes.append(
            invalid(str(numa_path), f"NUMA feature gate is not enabled in kubevirt-config, invalid entry {numa_path}")
        )
    if not is_true(cpu.get("dedicatedCpuPlacement")):
        causes.append(
            invalid(
                str(numa_path),
                f"{field.child('domain', 'cpu', 'dedicatedCpuPlacement')} must be set to true when NUMA topology "
                f"strategy is set in {numa_path}",
            )
        )
    if get(spec, "domain", "memory", "hugepages") is None:
        causes.append(
            invalid(
                str(numa_path),
                f"{field.child('domain', 'memory', 'hugepages')} must be requested when NUMA topology strategy is "
                f"set in {numa_path}",
            )
        )
    return causes


def validate_isolate_emulator_thread(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    cpu = _cpu(spec)
    if is_true(cpu.get("isolateEmulatorThread")) and not is_true(cpu.get("dedicatedCpuPlacement")):
        return [
            invalid(
                str(field.child("domain", "cpu", "isolateEmulatorThread")),
                "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement",
            )
        ]
    return []


def validate_cpu_feature_policies(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    for idx, raw in enumerate(as_list(_cpu(spec).get("features"))):
        feature = as_map(raw)
        policy = as_str(feature.get("policy"))
        if policy not in VALID_CPU_FEATURE_POLICIES:
            causes.append(
                not_supported(
                    str(field.child("domain", "cpu", "features").index(idx).child("policy")),
                    f"CPU feature {as_str(feature.get('name'))} uses policy {policy} that is not supported.",
                )
            )
    return causes


def validate_cpu_hotplug(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    cpu = _cpu(spec)
    max_sockets = as_int(cpu.get("maxSockets"))
    if max_sockets != 0 and as_int(cpu.get("sockets")) > max_sockets:
        return [
            invalid(
                str(field.child("domain", "cpu", "sockets")),
                "Number of sockets in CPU topology is greater than the maximum sockets allowed",
            )
        ]
    return []


def validate_realtime(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    cpu = _cpu(spec)
    if cpu.get("realtime") is None:
        return []
    causes: list[Cause] = []
    realtime_path = field.child("domain", "cpu", "realtime")
    if not is_true(cpu.get("dedicatedCpuPlacement")):
        path = field.child("domain", "cpu", "dedicatedCpuPlacement")
        causes.append(required(str(path), f"{path} must be set to true when {realtime_path} is used"))
    if get(cpu, "numa", "guestMappingPassthrough") is None:
        path = field.child("domain", "cpu", "numa", "guestMappingPassthrough")
        causes.append(required(str(path), f"{path} must be defined when {realtime_path} is used"))
    return causes


def validate_io_threads_policy(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    domain = as_map(spec.get("domain"))
    policy = domain.get("ioThreadsPolicy")
    if policy is None:
        return []
    causes: list[Cause] = []
    if policy not in VALID_IO_THREADS_POLICIES:
        causes.append(invalid(str(field.child("domain", "ioThreadsPolicy")), f"Invalid IOThreadsPolicy ({policy})"))
    count = get(domain, "ioThreads", "supplementalPoolThreadCount")
    if policy == "supplementalPool" and (count is None or as_int(count) < 1):
        causes.append(
            invalid(
                str(field.child("domain", "ioThreads", "count")),
                "the number of iothreads needs to be set and positive for the dedicated policy",
            )
        )
    return causes


def validate_reserved_overhead(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    memory = get(spec, "domain", "memory")
    if memory is None or get(memory, "reservedOverhead") is None:
        return []
    if ctx.config.gate_enabled("ReservedOverheadMemlock"):
        return []
    return [
        invalid(
            str(field.child("domain", "memory", "reservedOverhead")),
            "Reserved overhead memlock feature gate is not enabled in kubevirt-config",
        )
    ]


def validate_mandatory_memory(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """VMI-only (after defaults): some memory must be requested. Upstream sets no field on this cause."""
    if int_value(resource(spec, "requests", "memory")) != 0:
        return []
    memory = get(spec, "domain", "memory")
    if memory is None or (get(memory, "guest") is None and get(memory, "hugepages") is None):
        return [
            required(
                "",
                "no memory requested, at least one of "
                f"'{field.child('domain', 'memory', 'guest')}', "
                f"'{field.child('domain', 'memory', 'hugepages', 'pageSize')}' or "
                f"'{field.child('domain', 'resources', 'requests', 'memory')}' must be set",
            )
        ]
    return []


def live_update_memory_error(spec: Mapping[str, Any], max_guest: Quantity | None) -> str | None:
    """memory.ValidateLiveUpdateMemory: why memory hotplug cannot work for this spec, or None."""
    cpu = _cpu(spec)
    domain = as_map(spec.get("domain"))
    if cpu.get("realtime") is not None:
        return "Memory hotplug is not compatible with realtime VMs"
    if get(cpu, "numa", "guestMappingPassthrough") is not None:
        return "Memory hotplug is not compatible with guest mapping passthrough"
    if domain.get("launchSecurity") is not None:
        return "Memory hotplug is not compatible with encrypted VMs"
    alignment = HOTPLUG_BLOCK_ALIGNMENT
    if get(domain, "memory", "hugepages", "pageSize") == "1Gi":
        alignment = HOTPLUG_1G_HUGEPAGES_BLOCK_ALIGNMENT
    guest = _guest(spec)
    if get(domain, "memory") is None or guest is None:
        return "Guest memory must be configured when memory hotplug is enabled"
    if max_guest is None:
        return "Max guest memory must be configured when memory hotplug is enabled"
    if guest > max_guest:
        return "Guest memory is greater than the configured maxGuest memory"
    aligned = "2Mi" if alignment == HOTPLUG_BLOCK_ALIGNMENT else "1Gi"
    if int_value(guest) % alignment != 0:
        return f"Guest memory must be {aligned} aligned"
    if int_value(max_guest) % alignment != 0:
        return f"MaxGuest must be {aligned} aligned"
    if as_str(spec.get("architecture")) != "amd64":
        return "Memory hotplug is only available for x86_64 VMs"
    if int_value(guest) < MIN_HOTPLUG_GUEST_MEMORY:
        return "Memory hotplug is only available for VMs with at least 1Gi of guest memory"
    return None
