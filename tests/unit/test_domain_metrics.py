"""The pure mapping from a launcher's `domainstats` reply to KubeVirt's per-VMI metrics, and its exposition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from pykubevirt.handler.domain_metrics import CATALOG, vmi_labels, vmi_samples
from pykubevirt.launcher.domain_stats import device_aliases
from pykubevirt.metrics.exposition import Sample, families, render

VMI: dict[str, Any] = {
    "metadata": {"namespace": "ns", "name": "vm1", "labels": {"kubevirt.io/domain": "vm1", "app-tier": "web"}},
    "spec": {"networks": [{"name": "default", "pod": {}}]},
    "status": {"nodeName": "node-a", "phase": "Running"},
}
BASE = {
    "node": "node-a",
    "namespace": "ns",
    "name": "vm1",
    "kubernetes_vmi_label_kubevirt_io_domain": "vm1",
    "kubernetes_vmi_label_app_tier": "web",
}
# What libvirt's bulk stats, memoryStats and info give for a running QEMU domain (times ns, memory KiB).
REPLY: dict[str, Any] = {
    "stats": {
        "state.state": 1,
        "cpu.time": 3_500_000_000,
        "cpu.user": 1_000_000_000,
        "cpu.system": 500_000_000,
        "balloon.current": 1_048_576,
        "balloon.maximum": 1_048_576,
        "balloon.rss": 400_000,
        "balloon.available": 1_000_000,
        "balloon.unused": 600_000,
        "balloon.major_fault": 7,
        "vcpu.current": 2,
        "vcpu.maximum": 2,
        "vcpu.0.state": 1,
        "vcpu.0.time": 2_000_000_000,
        "vcpu.0.wait": 10_000_000,
        "vcpu.1.state": 2,
        "vcpu.1.time": 1_000_000_000,
        "net.count": 1,
        "net.0.name": "tap0",
        "net.0.rx.bytes": 1500,
        "net.0.rx.pkts": 3,
        "net.0.tx.bytes": 900,
        "net.0.tx.pkts": 2,
        "block.count": 1,
        "block.0.name": "vda",
        "block.0.rd.reqs": 10,
        "block.0.rd.bytes": 40960,
        "block.0.rd.times": 2_000_000,
        "block.0.wr.reqs": 4,
        "block.0.wr.bytes": 8192,
    },
    "memory": {"rss": 999, "actual": 1_048_576},
    "info": {"maxMemory": 2_097_152, "memory": 1_048_576, "vcpus": 2, "cpuTime": 3_500_000_000},
    "aliases": {"tap0": "default", "vda": "rootdisk"},
}


def by_name(samples: list[Sample]) -> dict[str, list[Sample]]:
    grouped: dict[str, list[Sample]] = {}
    for sample in samples:
        grouped.setdefault(sample.name, []).append(sample)
    return grouped


def test_labels_are_node_namespace_name_and_the_vmi_labels_made_safe() -> None:
    assert vmi_labels(VMI) == BASE


def test_cpu_and_vcpu_times_are_seconds_with_id_and_state() -> None:
    got = by_name(vmi_samples(VMI, REPLY))
    assert got["kubevirt_vmi_cpu_usage_seconds_total"] == [Sample("kubevirt_vmi_cpu_usage_seconds_total", BASE, 3.5)]
    assert got["kubevirt_vmi_cpu_user_usage_seconds_total"][0].value == 1.0
    assert [(s.labels["id"], s.labels["state"], s.value) for s in got["kubevirt_vmi_vcpu_seconds_total"]] == [
        ("0", "running", 2.0),
        ("1", "blocked", 1.0),
    ]
    assert got["kubevirt_vmi_vcpu_wait_seconds_total"][0].value == 0.01


def test_memory_is_bytes_bulk_balloon_wins_and_used_is_available_minus_unused() -> None:
    got = {s.name: s.value for s in vmi_samples(VMI, REPLY) if s.name.startswith("kubevirt_vmi_memory")}
    assert got["kubevirt_vmi_memory_resident_bytes"] == 400_000 * 1024
    assert got["kubevirt_vmi_memory_domain_bytes"] == 1_048_576 * 1024
    assert got["kubevirt_vmi_memory_available_bytes"] == 1_000_000 * 1024
    assert got["kubevirt_vmi_memory_used_bytes"] == 400_000 * 1024
    assert got["kubevirt_vmi_memory_actual_balloon_bytes"] == 1_048_576 * 1024
    assert got["kubevirt_vmi_memory_pgmajfault_total"] == 7


def test_devices_are_labelled_by_the_vmi_interface_network_and_volume() -> None:
    got = by_name(vmi_samples(VMI, REPLY))
    rx = got["kubevirt_vmi_network_receive_bytes_total"][0]
    assert (rx.labels["interface"], rx.labels["network"], rx.value) == ("default", "default", 1500)
    assert got["kubevirt_vmi_network_transmit_packets_total"][0].value == 2
    read = got["kubevirt_vmi_storage_read_traffic_bytes_total"][0]
    assert (read.labels["drive"], read.value) == ("rootdisk", 40960)
    assert got["kubevirt_vmi_storage_iops_write_total"][0].value == 4
    assert got["kubevirt_vmi_storage_read_times_seconds_total"][0].value == 0.002


def test_a_driver_without_bulk_groups_still_reports_cpu_and_memory_from_info_and_balloon_stats() -> None:
    reply = {"stats": {"state.state": 1}, "memory": {"rss": 1024, "available": 4096, "unused": 1024}}
    reply["info"] = {"maxMemory": 65536, "memory": 65536, "vcpus": 1, "cpuTime": 2_000_000_000}
    got = {s.name: s.value for s in vmi_samples(VMI, reply)}
    assert got["kubevirt_vmi_cpu_usage_seconds_total"] == 2.0
    assert got["kubevirt_vmi_memory_domain_bytes"] == 65536 * 1024
    assert got["kubevirt_vmi_memory_used_bytes"] == 3072 * 1024


def test_a_launcher_without_a_domain_gives_no_samples() -> None:
    assert vmi_samples(VMI, {"stats": {}, "memory": {}, "info": None, "aliases": {}}) == []


def test_the_exposition_names_types_and_helps_as_kubevirt() -> None:
    text = render(families(CATALOG, vmi_samples(VMI, REPLY))).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    cpu = parsed["kubevirt_vmi_cpu_usage_seconds"]
    assert cpu.type == "counter"
    assert cpu.documentation == "Total CPU time spent in all modes (sum of both vcpu and hypervisor usage)."
    assert cpu.samples[0].name == "kubevirt_vmi_cpu_usage_seconds_total" and cpu.samples[0].labels == BASE
    assert parsed["kubevirt_vmi_memory_resident_bytes"].type == "gauge"
    assert "# TYPE kubevirt_vmi_storage_iops_read_total counter" in text


def test_device_aliases_come_from_user_aliases_of_nics_and_disks() -> None:
    xml = """<domain><devices>
      <disk><target dev='vda'/><alias name='ua-rootdisk'/></disk>
      <disk><target dev='vdb'/><alias name='virtio-disk1'/></disk>
      <interface><target dev='tap0'/><alias name='ua-default'/></interface>
      <interface><alias name='ua-nodev'/></interface>
    </devices></domain>"""
    assert device_aliases(xml) == {"vda": "rootdisk", "tap0": "default"}


def test_the_fast_renderer_writes_what_prometheus_client_writes() -> None:
    other = {**VMI, "metadata": {**VMI["metadata"], "name": 'vm"2\\', "labels": {"note": "a\nb"}}}
    metrics = families(CATALOG, [*vmi_samples(VMI, REPLY), *vmi_samples(other, REPLY)])

    class Families(Collector):
        def collect(self) -> Iterator[Metric]:
            return iter(metrics)

    assert render(metrics) == generate_latest(Families())
