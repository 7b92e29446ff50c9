"""virt-controller's metric builders (pure) and the client-go style work-queue and REST client metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY

from pykubevirt.client.workqueue import WorkQueue
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.cluster_metrics import (
    PHASE_COUNT_LABELS,
    ControllerCollector,
    migration_counts,
    phase_counts,
    snapshot_family,
    vmi_descriptive_labels,
)
from pykubevirt.controller.vmi_detail_metrics import detail_families
from pykubevirt.metrics.rest_client import url_template


def vmi(name: str, phase: str, node: str = "node01", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {"vm.kubevirt.io/os": "fedora", "kubevirt.io/cluster-instancetype-name": "u1.small"},
        },
        "spec": {"domain": {"memory": {"guest": "128Mi"}, "devices": {}}},
        "status": {"phase": phase, "nodeName": node, **status},
    }


def migration(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"vmiName": "vm1"}, "status": {"phase": phase}}


def test_vmi_labels_lower_case_the_phase_and_read_annotations_and_guest_os() -> None:
    labels = vmi_descriptive_labels(vmi("a", "Running", guestOSInfo={"name": "Fedora", "kernelRelease": "6.1"}))
    assert (labels["phase"], labels["os"], labels["instance_type"]) == ("running", "fedora", "u1.small")
    assert (labels["guest_os_name"], labels["guest_os_kernel_release"], labels["evictable"]) == (
        "Fedora",
        "6.1",
        "true",
    )


def test_a_vmi_that_must_live_migrate_but_cannot_is_not_evictable() -> None:
    must = vmi("a", "Running")
    must["spec"]["evictionStrategy"] = "LiveMigrate"
    assert vmi_descriptive_labels(must, ClusterConfig())["evictable"] == "false"


def test_phase_counts_group_by_node_and_phase() -> None:
    counts = phase_counts([vmi("a", "Running"), vmi("b", "Running"), vmi("c", "Scheduling", node="")])
    named = [dict(zip(PHASE_COUNT_LABELS, key, strict=True)) for key in counts]
    by_phase = {(labels["node"], labels["phase"]): n for labels, n in zip(named, counts.values(), strict=True)}
    assert by_phase == {("node01", "running"): 2, ("", "scheduling"): 1}


def test_migrations_are_counted_by_phase_and_finished_ones_listed_as_kubevirt_sorts_them() -> None:
    phases = [("m1", ""), ("m2", "Pending"), ("m3", "TargetReady"), ("m4", "Succeeded"), ("m5", "Failed")]
    counts, finished = migration_counts([migration(name, phase) for name, phase in phases])
    assert counts == {"pending": 1, "scheduling": 0, "running": 1, "unset": 1}
    assert finished == [("vm1", "m4", "ns", True), ("vm1", "m5", "ns", False)]


def test_the_collector_reports_leadership_and_only_a_leader_reports_workload() -> None:
    leading = {"now": False}
    collector = ControllerCollector(
        vmis=lambda: [vmi("a", "Running")],
        pods=lambda: [
            {
                "metadata": {"name": "virt-launcher-a-x", "labels": {"kubevirt.io/created-by": "uid-a"}},
                "spec": {"nodeName": "node01"},
                "status": {"phase": "Running"},
            }
        ],
        migrations=lambda: [],
        config=ClusterConfig,
        leading=lambda: leading["now"],
        ready=lambda: True,
    )
    names = {m.name: m for m in collector.collect()}
    assert set(names) == {"kubevirt_virt_controller_leading_status", "kubevirt_virt_controller_ready_status"}
    assert names["kubevirt_virt_controller_leading_status"].samples[0].value == 0.0
    leading["now"] = True
    names = {m.name: m for m in collector.collect()}
    info = names["kubevirt_vmi_info"].samples[0].labels
    assert (info["vmi_pod"], info["name"], info["phase"]) == ("virt-launcher-a-x", "a", "running")
    overhead = names["kubevirt_vmi_launcher_memory_overhead_bytes"].samples[0]
    assert overhead.labels == {"namespace": "ns", "name": "a"} and overhead.value > 100 * 1024 * 1024
    assert names["kubevirt_vmi_migrations_in_running_phase"].samples[0].value == 0


def test_rest_client_urls_hide_namespace_and_name() -> None:
    server = "https://127.0.0.1:6443"
    assert url_template(server, "/api/v1/namespaces/ns1/pods/p1/status") == (
        "https://127.0.0.1:6443/api/v1/namespaces/{namespace}/pods/{name}/status"
    )
    assert url_template(server, "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachines") == (
        "https://127.0.0.1:6443/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines"
    )
    assert url_template(server, "/api/v1/nodes/node01?x=1") == "https://127.0.0.1:6443/api/v1/nodes/{name}"


def test_a_named_work_queue_reports_adds_depth_and_retries() -> None:
    async def run() -> None:
        queue: WorkQueue[str] = WorkQueue(name="unit-test-queue")

        def value(name: str) -> float:
            return REGISTRY.get_sample_value(name, {"name": "unit-test-queue"}) or 0.0

        queue.add("a")
        queue.add("b")
        queue.add("a")
        assert value("kubevirt_workqueue_adds_total") == 2
        assert value("kubevirt_workqueue_depth") == 2
        item = await queue.get()
        assert value("kubevirt_workqueue_depth") == 1
        queue.add_rate_limited(item)
        queue.done(item)
        assert value("kubevirt_workqueue_retries_total") == 1
        assert value("kubevirt_workqueue_work_duration_seconds_count") == 1
        queue.shutdown()

    asyncio.run(run())


def test_addresses_vnics_and_migration_times_are_labelled_as_kubevirt() -> None:
    running = vmi("a", "Running")
    running["spec"]["networks"] = [{"name": "default", "pod": {}}, {"name": "blue", "multus": {"networkName": "ns/br"}}]
    running["spec"]["domain"]["devices"]["interfaces"] = [
        {"name": "default", "masquerade": {}},
        {"name": "blue", "bridge": {}, "model": "e1000"},
        {"name": "orphan", "bridge": {}},
    ]
    running["status"]["interfaces"] = [
        {"name": "default", "interfaceName": "eth0", "ipAddress": "10.0.2.2"},
        {"name": "blue", "interfaceName": "eth1"},
        {},
    ]
    running["status"]["migrationState"] = {
        "migrationUid": "m-uid",
        "startTimestamp": "2026-01-01T00:00:00Z",
        "endTimestamp": "2026-01-01T00:00:10Z",
        "completed": True,
    }
    found = {m.name: m.samples for m in detail_families([running], {"m-uid": "move-a"})}
    assert [
        (s.labels["vnic_name"], s.labels["address"], s.labels["type"]) for s in found["kubevirt_vmi_status_addresses"]
    ] == [
        ("default", "10.0.2.2", "ExternalInterface"),
        ("blue", "", "SystemInterface"),
    ]
    vnics = [
        (
            s.labels["vnic_name"],
            s.labels["binding_type"],
            s.labels["binding_name"],
            s.labels["network"],
            s.labels["model"],
        )
        for s in found["kubevirt_vmi_vnic_info"]
    ]
    assert vnics == [
        ("default", "core", "masquerade", "pod networking", "<none>"),
        ("blue", "core", "bridge", "ns/br", "e1000"),
    ]
    (end,) = found["kubevirt_vmi_migration_end_time_seconds"]
    assert (end.labels["migration_name"], end.labels["status"]) == ("move-a", "succeeded")
    assert end.value - found["kubevirt_vmi_migration_start_time_seconds"][0].value == 10


def test_succeeded_snapshots_report_when_they_were_taken() -> None:
    def snapshot(name: str, phase: str, created: str | None) -> dict[str, Any]:
        status: dict[str, Any] = {"phase": phase}
        if created:
            status["creationTime"] = created
        return {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"source": {"kind": "VirtualMachine", "name": "vm"}},
            "status": status,
        }

    family = snapshot_family(
        [
            snapshot("a", "Succeeded", "2026-12-07T10:00:00Z"),
            snapshot("b", "InProgress", None),
            snapshot("c", "Failed", None),
        ]
    )
    assert family.name == "kubevirt_vmsnapshot_succeeded_timestamp_seconds"
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"name": "vm", "snapshot_name": "a", "namespace": "ns"}, 1796637600.0)
    ]
