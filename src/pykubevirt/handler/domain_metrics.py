"""virt-handler's per-VMI domain metrics: KubeVirt's names, labels, units and help text, from one launcher's stats.

Pure: `vmi_samples` maps a VMI and its launcher's `domainstats` reply (libvirt bulk stats, balloon memory stats,
domain info and device aliases) to samples, as KubeVirt's domainstats collectors do. libvirt reports times in
nanoseconds and memory in KiB; the metrics are in seconds and bytes.

While the VMI migrates away from this node, the source launcher's reply also carries libvirt's job statistics, and
`migration_samples` maps them to KubeVirt's migration progress metrics (its virt-handler's migrationdomainstats
collector): labelled `namespace`, `name`, `node` only, and reported while the VMI's migrationState is not completed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pykubevirt.metrics.exposition import Descriptor, Sample

NS = 1e-9
KIB = 1024

CPU_USAGE = "kubevirt_vmi_cpu_usage_seconds_total"
CPU_USER = "kubevirt_vmi_cpu_user_usage_seconds_total"
CPU_SYSTEM = "kubevirt_vmi_cpu_system_usage_seconds_total"
VCPU_SECONDS = "kubevirt_vmi_vcpu_seconds_total"
VCPU_WAIT = "kubevirt_vmi_vcpu_wait_seconds_total"
VCPU_DELAY = "kubevirt_vmi_vcpu_delay_seconds_total"
MEMORY_RESIDENT = "kubevirt_vmi_memory_resident_bytes"
MEMORY_DOMAIN = "kubevirt_vmi_memory_domain_bytes"
MEMORY_AVAILABLE = "kubevirt_vmi_memory_available_bytes"
MEMORY_USED = "kubevirt_vmi_memory_used_bytes"

MIGRATION_DATA_TOTAL = "kubevirt_vmi_migration_data_bytes_total"
MIGRATION_DATA_REMAINING = "kubevirt_vmi_migration_data_remaining_bytes"
MIGRATION_DATA_PROCESSED = "kubevirt_vmi_migration_data_processed_bytes"
MIGRATION_DIRTY_MEMORY_RATE = "kubevirt_vmi_migration_dirty_memory_rate_bytes"
MIGRATION_MEMORY_TRANSFER_RATE = "kubevirt_vmi_migration_memory_transfer_rate_bytes"

# KubeVirt's MigrationStatsCollector, in its order (`kubevirt_vmi_migration_data_bytes_total` replaced
# `kubevirt_vmi_migration_data_total_bytes`, now a deprecated recording rule of the same value).
MIGRATION_CATALOG: tuple[Descriptor, ...] = (
    Descriptor(MIGRATION_DATA_TOTAL, "counter", "The total Guest OS data to be migrated to the new VM."),
    Descriptor(MIGRATION_DATA_REMAINING, "gauge", "The remaining guest OS data to be migrated to the new VM."),
    Descriptor(MIGRATION_DATA_PROCESSED, "gauge", "The total Guest OS data processed and migrated to the new VM."),
    Descriptor(MIGRATION_DIRTY_MEMORY_RATE, "gauge", "The rate of memory being dirty in the Guest OS."),
    Descriptor(MIGRATION_MEMORY_TRANSFER_RATE, "gauge", "The rate at which the memory is being transferred."),
)
# libvirt's job statistics (bytes, bytes/s) → metric (KubeVirt's Convert_libvirt_DomainJobInfo_To_stats_DomainJobInfo).
_JOB_FIELDS = {
    "data_total": MIGRATION_DATA_TOTAL,
    "data_remaining": MIGRATION_DATA_REMAINING,
    "data_processed": MIGRATION_DATA_PROCESSED,
    "memory_bps": MIGRATION_MEMORY_TRANSFER_RATE,
}

CATALOG: tuple[Descriptor, ...] = (
    Descriptor(CPU_USAGE, "counter", "Total CPU time spent in all modes (sum of both vcpu and hypervisor usage)."),
    Descriptor(CPU_USER, "counter", "Total CPU time spent in user mode."),
    Descriptor(CPU_SYSTEM, "counter", "Total CPU time spent in system mode."),
    Descriptor(
        VCPU_SECONDS,
        "counter",
        "Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time). Where `id` is "
        "the vcpu identifier and `state` can be one of the following: [`OFFLINE`, `RUNNING`, `BLOCKED`].",
    ),
    Descriptor(VCPU_WAIT, "counter", "Amount of time spent by each vcpu while waiting on I/O."),
    Descriptor(VCPU_DELAY, "counter", "Amount of time spent by each vcpu waiting in the queue instead of running."),
    Descriptor(MEMORY_RESIDENT, "gauge", "Resident set size of the process running the domain."),
    Descriptor(
        MEMORY_DOMAIN,
        "gauge",
        "The amount of memory in bytes allocated to the domain. The `memory` value in domain xml file.",
    ),
    Descriptor(
        MEMORY_AVAILABLE,
        "gauge",
        "Amount of usable memory as seen by the domain. This value may not be accurate if a balloon driver is in use "
        "or if the guest OS does not initialize all assigned pages",
    ),
    Descriptor(MEMORY_USED, "gauge", "Amount of `used` memory as seen by the domain."),
    Descriptor(
        "kubevirt_vmi_memory_unused_bytes",
        "gauge",
        "The amount of memory left completely unused by the system. Memory that is available but used for "
        "reclaimable caches should NOT be reported as free.",
    ),
    Descriptor(
        "kubevirt_vmi_memory_cached_bytes",
        "gauge",
        "The amount of memory that is being used to cache I/O and is available to be reclaimed, corresponds to the "
        "sum of `Buffers` + `Cached` + `SwapCached` in `/proc/meminfo`.",
    ),
    Descriptor(
        "kubevirt_vmi_memory_usable_bytes",
        "gauge",
        "The amount of memory which can be reclaimed by balloon without pushing the guest system to swap, "
        "corresponds to 'Available' in /proc/meminfo.",
    ),
    Descriptor("kubevirt_vmi_memory_actual_balloon_bytes", "gauge", "Current balloon size in bytes."),
    Descriptor(
        "kubevirt_vmi_memory_swap_in_traffic_bytes",
        "gauge",
        "The total amount of data read from swap space of the guest in bytes.",
    ),
    Descriptor(
        "kubevirt_vmi_memory_swap_out_traffic_bytes",
        "gauge",
        "The total amount of memory written out to swap space of the guest in bytes.",
    ),
    Descriptor(
        "kubevirt_vmi_memory_pgmajfault_total",
        "counter",
        "The number of page faults when disk IO was required. Page faults occur when a process makes a valid access "
        "to virtual memory that is not available. When servicing the page fault, if disk IO is required, it is "
        "considered as major fault.",
    ),
    Descriptor(
        "kubevirt_vmi_memory_pgminfault_total",
        "counter",
        "The number of other page faults, when disk IO was not required. Page faults occur when a process makes a "
        "valid access to virtual memory that is not available. When servicing the page fault, if disk IO is NOT "
        "required, it is considered as minor fault.",
    ),
    Descriptor("kubevirt_vmi_network_receive_bytes_total", "counter", "Total network traffic received in bytes."),
    Descriptor("kubevirt_vmi_network_transmit_bytes_total", "counter", "Total network traffic transmitted in bytes."),
    Descriptor("kubevirt_vmi_network_receive_packets_total", "counter", "Total network traffic received packets."),
    Descriptor("kubevirt_vmi_network_transmit_packets_total", "counter", "Total network traffic transmitted packets."),
    Descriptor("kubevirt_vmi_network_receive_errors_total", "counter", "Total network received error packets."),
    Descriptor("kubevirt_vmi_network_transmit_errors_total", "counter", "Total network transmitted error packets."),
    Descriptor(
        "kubevirt_vmi_network_receive_packets_dropped_total",
        "counter",
        "The total number of rx packets dropped on vNIC interfaces.",
    ),
    Descriptor(
        "kubevirt_vmi_network_transmit_packets_dropped_total",
        "counter",
        "The total number of tx packets dropped on vNIC interfaces.",
    ),
    Descriptor("kubevirt_vmi_storage_iops_read_total", "counter", "Total number of I/O read operations."),
    Descriptor("kubevirt_vmi_storage_iops_write_total", "counter", "Total number of I/O write operations."),
    Descriptor("kubevirt_vmi_storage_read_traffic_bytes_total", "counter", "Total number of bytes read from storage."),
    Descriptor("kubevirt_vmi_storage_write_traffic_bytes_total", "counter", "Total number of written bytes."),
    Descriptor("kubevirt_vmi_storage_read_times_seconds_total", "counter", "Total time spent on read operations."),
    Descriptor("kubevirt_vmi_storage_write_times_seconds_total", "counter", "Total time spent on write operations."),
    Descriptor("kubevirt_vmi_storage_flush_requests_total", "counter", "Total storage flush requests."),
    Descriptor("kubevirt_vmi_storage_flush_times_seconds_total", "counter", "Total time spent on cache flushing."),
    *MIGRATION_CATALOG,
)

# Balloon memory stats (KiB; virDomainMemoryStats keys) → gauge. The bulk stats' `balloon.<key>` take precedence.
_MEMORY_GAUGES = {
    "rss": MEMORY_RESIDENT,
    "available": MEMORY_AVAILABLE,
    "unused": "kubevirt_vmi_memory_unused_bytes",
    "disk_caches": "kubevirt_vmi_memory_cached_bytes",
    "usable": "kubevirt_vmi_memory_usable_bytes",
    "actual": "kubevirt_vmi_memory_actual_balloon_bytes",
    "swap_in": "kubevirt_vmi_memory_swap_in_traffic_bytes",
    "swap_out": "kubevirt_vmi_memory_swap_out_traffic_bytes",
}
_MEMORY_COUNTERS = {
    "major_fault": "kubevirt_vmi_memory_pgmajfault_total",
    "minor_fault": "kubevirt_vmi_memory_pgminfault_total",
}
# Bulk stats name the balloon's current size `balloon.current`; memoryStats calls it `actual`.
_BULK_BALLOON_ALIASES = {"current": "actual"}
# libvirt's bulk net.N.* and block.N.* fields → (metric, scale).
_NET_FIELDS = {
    "rx.bytes": "kubevirt_vmi_network_receive_bytes_total",
    "tx.bytes": "kubevirt_vmi_network_transmit_bytes_total",
    "rx.pkts": "kubevirt_vmi_network_receive_packets_total",
    "tx.pkts": "kubevirt_vmi_network_transmit_packets_total",
    "rx.errs": "kubevirt_vmi_network_receive_errors_total",
    "tx.errs": "kubevirt_vmi_network_transmit_errors_total",
    "rx.drop": "kubevirt_vmi_network_receive_packets_dropped_total",
    "tx.drop": "kubevirt_vmi_network_transmit_packets_dropped_total",
}
_BLOCK_FIELDS = {
    "rd.reqs": ("kubevirt_vmi_storage_iops_read_total", 1.0),
    "wr.reqs": ("kubevirt_vmi_storage_iops_write_total", 1.0),
    "rd.bytes": ("kubevirt_vmi_storage_read_traffic_bytes_total", 1.0),
    "wr.bytes": ("kubevirt_vmi_storage_write_traffic_bytes_total", 1.0),
    "rd.times": ("kubevirt_vmi_storage_read_times_seconds_total", NS),
    "wr.times": ("kubevirt_vmi_storage_write_times_seconds_total", NS),
    "fl.reqs": ("kubevirt_vmi_storage_flush_requests_total", 1.0),
    "fl.times": ("kubevirt_vmi_storage_flush_times_seconds_total", NS),
}
# virVcpuState → the `state` label KubeVirt writes.
VCPU_STATES = {0: "offline", 1: "running", 2: "blocked"}
_LABEL_UNSAFE = re.compile(r"[./-]")


def vmi_labels(vmi: Mapping[str, Any]) -> dict[str, str]:
    """node, namespace, name, and each VMI label as `kubernetes_vmi_label_<key with . / - as _>`."""
    metadata = vmi.get("metadata") or {}
    labels = {
        "node": str((vmi.get("status") or {}).get("nodeName", "")),
        "namespace": str(metadata.get("namespace", "")),
        "name": str(metadata.get("name", "")),
    }
    for key, value in (metadata.get("labels") or {}).items():
        labels["kubernetes_vmi_label_" + _LABEL_UNSAFE.sub("_", key)] = str(value)
    return labels


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _indexed(stats: Mapping[str, Any], group: str) -> dict[int, dict[str, Any]]:
    """libvirt's flattened `<group>.<N>.<field>` stats as {N: {field: value}}."""
    devices: dict[int, dict[str, Any]] = {}
    prefix = group + "."
    for key, value in stats.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            devices.setdefault(int(index), {})[rest] = value
    return devices


def _network_of(vmi: Mapping[str, Any], interface: str) -> str:
    """The VMI network an interface is attached to (interfaces and networks pair up by name in a VMI spec)."""
    networks = (vmi.get("spec") or {}).get("networks") or []
    return interface if any(n.get("name") == interface for n in networks if isinstance(n, dict)) else ""


def _memory_samples(reply: Mapping[str, Any], base: dict[str, str]) -> list[Sample]:
    stats = reply.get("stats") or {}
    memory: dict[str, Any] = dict(reply.get("memory") or {})
    for key, value in stats.items():
        if key.startswith("balloon."):
            field = key.removeprefix("balloon.")
            memory[_BULK_BALLOON_ALIASES.get(field, field)] = value
    samples: list[Sample] = []
    for key, metric in _MEMORY_GAUGES.items():
        value = _number(memory.get(key))
        if value is not None:
            samples.append(Sample(metric, base, value * KIB))
    for key, metric in _MEMORY_COUNTERS.items():
        value = _number(memory.get(key))
        if value is not None:
            samples.append(Sample(metric, base, value))
    info = reply.get("info") or {}
    domain = _number(memory.get("maximum", info.get("maxMemory")))
    if domain is not None:
        samples.append(Sample(MEMORY_DOMAIN, base, domain * KIB))
    available, unused = _number(memory.get("available")), _number(memory.get("unused"))
    if available is not None and unused is not None:
        samples.append(Sample(MEMORY_USED, base, (available - unused) * KIB))
    return samples


def _cpu_samples(reply: Mapping[str, Any], base: dict[str, str]) -> list[Sample]:
    stats = reply.get("stats") or {}
    samples: list[Sample] = []
    # Drivers without the cpu group in their bulk stats still report the total in the domain info.
    total = _number(stats.get("cpu.time", (reply.get("info") or {}).get("cpuTime")))
    if total is not None:
        samples.append(Sample(CPU_USAGE, base, total * NS))
    for key, metric in (("cpu.user", CPU_USER), ("cpu.system", CPU_SYSTEM)):
        value = _number(stats.get(key))
        if value is not None:
            samples.append(Sample(metric, base, value * NS))
    for index, vcpu in sorted(_indexed(stats, "vcpu").items()):
        labels = {**base, "id": str(index)}
        time = _number(vcpu.get("time"))
        if time is not None:
            state = VCPU_STATES.get(int(vcpu.get("state", -1)), "unknown")
            samples.append(Sample(VCPU_SECONDS, {**labels, "state": state}, time * NS))
        for field, metric in (("wait", VCPU_WAIT), ("delay", VCPU_DELAY)):
            value = _number(vcpu.get(field))
            if value is not None:
                samples.append(Sample(metric, labels, value * NS))
    return samples


def _device_samples(vmi: Mapping[str, Any], reply: Mapping[str, Any], base: dict[str, str]) -> list[Sample]:
    stats = reply.get("stats") or {}
    aliases: Mapping[str, str] = reply.get("aliases") or {}
    samples: list[Sample] = []
    for _, net in sorted(_indexed(stats, "net").items()):
        device = str(net.get("name", ""))
        if not device:
            continue
        interface = aliases.get(device, device)
        labels = {**base, "interface": interface, "network": _network_of(vmi, interface)}
        for field, metric in _NET_FIELDS.items():
            value = _number(net.get(field))
            if value is not None:
                samples.append(Sample(metric, labels, value))
    for _, block in sorted(_indexed(stats, "block").items()):
        device = str(block.get("name", ""))
        if not device:
            continue
        labels = {**base, "drive": aliases.get(device, device)}
        for field, (metric, scale) in _BLOCK_FIELDS.items():
            value = _number(block.get(field))
            if value is not None:
                samples.append(Sample(metric, labels, value * scale))
    return samples


def migration_samples(vmi: Mapping[str, Any], reply: Mapping[str, Any]) -> list[Sample]:
    """KubeVirt's migration progress metrics of a VMI migrating away, from the job statistics its source launcher's
    reply carries (none without them, or once the VMI's migrationState is completed or gone)."""
    job = reply.get("migrationJob") or {}
    state = (vmi.get("status") or {}).get("migrationState")
    if not job or not isinstance(state, Mapping) or state.get("completed"):
        return []
    metadata = vmi.get("metadata") or {}
    labels = {
        "namespace": str(metadata.get("namespace", "")),
        "name": str(metadata.get("name", "")),
        "node": str((vmi.get("status") or {}).get("nodeName", "")),
    }
    samples = []
    for field, metric in _JOB_FIELDS.items():
        value = _number(job.get(field))
        if value is not None:
            samples.append(Sample(metric, labels, value))
    # libvirt counts dirtied pages per second; KubeVirt reports bytes, and only when both are known.
    pages, page_size = _number(job.get("memory_dirty_rate")), _number(job.get("memory_page_size"))
    if pages is not None and page_size is not None:
        samples.append(Sample(MIGRATION_DIRTY_MEMORY_RATE, labels, pages * page_size))
    return samples


def vmi_samples(vmi: Mapping[str, Any], reply: Mapping[str, Any]) -> list[Sample]:
    """The domain metrics of one VMI from its launcher's `domainstats` reply (none when it has no domain)."""
    if not reply.get("stats") and not reply.get("info"):
        return []
    base = vmi_labels(vmi)
    return [
        *_cpu_samples(reply, base),
        *_memory_samples(reply, base),
        *_device_samples(vmi, reply, base),
        *migration_samples(vmi, reply),
    ]
