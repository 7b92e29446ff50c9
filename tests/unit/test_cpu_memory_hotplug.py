"""CPU and memory hotplug decisions, conditions and devices, mirroring KubeVirt's vm_test.go (handleCPUChangeRequest,
handleMemoryHotplugRequest, syncRestartRequired), lifecycle.go's hotplug conditions, the workload updater and
memory.BuildMemoryDevice."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import cluster_config
from pykubevirt.controller.hotplug_conditions import (
    require_cpu_hotplug,
    require_memory_hotplug,
    sync_hotplug_conditions,
)
from pykubevirt.controller.vm_conditions import MESSAGE_RESTART_REQUIRED, vm_conditions
from pykubevirt.controller.vm_hotplug import cpu_action, memory_action, without_live_updatable
from pykubevirt.controller.workload_updater import live_migrate_allowed, migration_manifest, needs_migration
from pykubevirt.handler.resource_hotplug import memory_changes
from pykubevirt.launcher.memory_hotplug import build_virtio_mem, device_sizes, virtio_mem_device, with_requested
from pykubevirt.launcher.vcpu_hotplug import requested_vcpus

Obj = dict[str, Any]
CONFIG = ClusterConfig()
GI = 1 << 30
FAILED_MESSAGE = "memory updated in template spec. Memory-hotplug failed and is not available for this VM configuration"


def running_vmi(*conditions: Obj, sockets: int = 1, guest: str = "1Gi") -> Obj:
    """A running VMI as admission and virt-handler leave it: maxSockets 4×, maxGuest 4×, LiveMigratable."""
    return {
        "metadata": {"name": "vm", "namespace": "default", "uid": "u"},
        "spec": {
            "architecture": "amd64",
            "domain": {
                "cpu": {"sockets": sockets, "cores": 1, "threads": 1, "maxSockets": 4},
                "memory": {"guest": guest, "maxGuest": "4Gi"},
                "resources": {"requests": {"memory": guest}},
            },
        },
        "status": {
            "phase": "Running",
            "currentCPUTopology": {"sockets": 1, "cores": 1, "threads": 1},
            "memory": {"guestAtBoot": "1Gi", "guestCurrent": "1Gi", "guestRequested": "1Gi"},
            "conditions": [{"type": "LiveMigratable", "status": "True"}, *conditions],
        },
    }


def template(sockets: int = 1, guest: str = "1Gi", **domain: Any) -> Obj:
    return {
        "architecture": "amd64",
        "domain": {"cpu": {"sockets": sockets, "cores": 1, "threads": 1}, "memory": {"guest": guest}, **domain},
    }


# ------------------------------------------------------------------------------------------------ RestartRequired


def test_sockets_guest_and_scheduling_are_live_updatable() -> None:
    before = template()
    before["nodeSelector"] = {"a": "b"}
    now = template(sockets=2, guest="2Gi")
    now["tolerations"] = [{"key": "k"}]
    assert without_live_updatable(before, now) == now


def test_other_fields_still_need_a_restart() -> None:
    now = template(sockets=2)
    now["domain"]["cpu"]["cores"] = 2
    assert without_live_updatable(template(), now) != now


def test_restart_required_message_is_the_given_one_and_replaces_another() -> None:
    vm: Obj = {"metadata": {}, "status": {"conditions": []}}
    vmi = {"metadata": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    generic = vm_conditions(vm, vmi, sync_error=None, now="t", restart_required=True)
    assert generic[0]["message"] == MESSAGE_RESTART_REQUIRED
    vm["status"]["conditions"] = generic
    specific = vm_conditions(vm, vmi, sync_error=None, now="t", restart_required="Reduction of CPU socket count")
    assert [c["message"] for c in specific if c["type"] == "RestartRequired"] == ["Reduction of CPU socket count"]


# ------------------------------------------------------------------------------------------------ CPU


def test_more_sockets_patch_the_vmi() -> None:
    action = cpu_action(template(sockets=2), running_vmi(), CONFIG)
    assert action is not None and action.restart is None and action.error is None
    assert action.patch == [
        {"op": "test", "path": "/spec/domain/cpu/sockets", "value": 1},
        {"op": "replace", "path": "/spec/domain/cpu/sockets", "value": 2},
    ]


def test_cpu_requests_and_limits_grow_by_the_allocation_ratio() -> None:
    vmi = running_vmi()
    vmi["spec"]["domain"]["resources"] = {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}
    resources = {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}
    action = cpu_action(template(sockets=3, resources=resources), vmi, CONFIG)
    assert action is not None and action.patch is not None
    replaced = {op["path"]: op["value"] for op in action.patch if op["op"] == "replace"}
    # Two more vCPUs at cpuAllocationRatio 10: 200m more.
    assert replaced["/spec/domain/resources/requests/cpu"] == "300m"
    assert replaced["/spec/domain/resources/limits/cpu"] == "1200m"


def test_same_sockets_ask_nothing() -> None:
    assert cpu_action(template(), running_vmi(), CONFIG) is None


@pytest.mark.parametrize(
    ("sockets", "vmi_sockets", "message"),
    [
        (5, 1, "CPU sockets updated in template spec to a value higher than what's available"),
        (1, 2, "Reduction of CPU socket count requires a restart"),
    ],
)
def test_cpu_changes_hotplug_cannot_serve(sockets: int, vmi_sockets: int, message: str) -> None:
    action = cpu_action(template(sockets=sockets), running_vmi(sockets=vmi_sockets), CONFIG)
    assert action is not None and action.restart == message


def test_arm_has_no_cpu_hotplug() -> None:
    spec = template(sockets=2)
    spec["architecture"] = "arm64"
    action = cpu_action(spec, running_vmi(), CONFIG)
    assert action is not None and action.restart == "ARM doesn't support CPU hotplug"


def test_cpu_change_waits_for_one_in_progress_or_a_migration() -> None:
    busy = running_vmi({"type": "HotVCPUChange", "status": "True"})
    action = cpu_action(template(sockets=3), busy, CONFIG)
    assert action is not None and action.error is not None
    assert action.error.message == "another CPU hotplug is in progress"
    migrating = running_vmi()
    migrating["status"]["migrationState"] = {"startTimestamp": "t"}
    action = cpu_action(template(sockets=2), migrating, CONFIG)
    assert action is not None and action.error is not None
    assert action.error.message == "CPU hotplug is not allowed while VMI is migrating"


# ------------------------------------------------------------------------------------------------ memory


def test_more_guest_memory_patches_guest_and_request() -> None:
    action = memory_action(template(guest="2Gi"), running_vmi())
    assert action is not None and action.patch == [
        {"op": "test", "path": "/spec/domain/memory/guest", "value": "1Gi"},
        {"op": "replace", "path": "/spec/domain/memory/guest", "value": "2Gi"},
        {"op": "test", "path": "/spec/domain/resources/requests/memory", "value": "1Gi"},
        {"op": "replace", "path": "/spec/domain/resources/requests/memory", "value": "2Gi"},
    ]


@pytest.mark.parametrize(
    ("guest", "change", "message"),
    [
        ("8Gi", None, "memory hotplug not supported, Guest memory is greater than the configured maxGuest memory"),
        (
            "512Mi",
            None,
            "memory hotplug not supported, Memory hotplug is only available for VMs with at least 1Gi of guest memory",
        ),
        ("2Gi", "False", FAILED_MESSAGE),
    ],
)
def test_memory_changes_hotplug_cannot_serve(guest: str, change: str | None, message: str) -> None:
    vmi = running_vmi(*([{"type": "HotMemoryChange", "status": change}] if change else []))
    action = memory_action(template(guest=guest), vmi)
    assert action is not None and action.restart == message


def test_memory_below_boot_needs_a_restart() -> None:
    vmi = running_vmi(guest="2Gi")
    vmi["status"]["memory"] = {"guestAtBoot": "2Gi", "guestCurrent": "2Gi", "guestRequested": "2Gi"}
    action = memory_action(template(guest="1Gi"), vmi)
    assert action is not None
    assert action.restart == "memory updated in template spec to a value lower than what the VM started with"


def test_memory_hotplug_needs_a_migratable_vmi_with_max_guest() -> None:
    vmi = running_vmi()
    vmi["status"]["conditions"] = []
    action = memory_action(template(guest="2Gi"), vmi)
    assert action is not None
    assert action.restart == "memory updated in template spec. Memory-hotplug is only available for migratable VMs"
    vmi = running_vmi()
    del vmi["spec"]["domain"]["memory"]["maxGuest"]
    action = memory_action(template(guest="2Gi"), vmi)
    assert action is not None
    assert (
        action.restart == "memory updated in template spec. Memory-hotplug is not available for this VM configuration"
    )


# ------------------------------------------------------------------------------------------------ VMI conditions


def test_hotplug_conditions_follow_spec_against_status() -> None:
    vmi = running_vmi(sockets=2, guest="2Gi")
    assert require_cpu_hotplug(vmi) and require_memory_hotplug(vmi)
    sync_hotplug_conditions(vmi)
    sync_hotplug_conditions(vmi)
    kinds = [c["type"] for c in vmi["status"]["conditions"]]
    assert kinds == ["LiveMigratable", "HotVCPUChange", "HotMemoryChange"]
    settled = running_vmi()
    sync_hotplug_conditions(settled)
    assert [c["type"] for c in settled["status"]["conditions"]] == ["LiveMigratable"]


def test_no_cpu_hotplug_without_max_sockets() -> None:
    vmi = running_vmi(sockets=2)
    del vmi["spec"]["domain"]["cpu"]["maxSockets"]
    assert not require_cpu_hotplug(vmi)


def test_workload_updater_migrates_a_vmi_waiting_for_hotplug() -> None:
    waiting = running_vmi({"type": "HotVCPUChange", "status": "True"}, sockets=2)
    assert needs_migration(waiting)
    assert not needs_migration(running_vmi())
    migrating = copy.deepcopy(waiting)
    migrating["status"]["migrationState"] = {"startTimestamp": "t"}
    assert not needs_migration(migrating)
    failed_memory = running_vmi({"type": "HotMemoryChange", "status": "False"})
    assert not needs_migration(failed_memory)
    manifest = migration_manifest(waiting)
    assert manifest["metadata"]["generateName"] == "kubevirt-workload-update-"
    assert manifest["metadata"]["annotations"] == {"kubevirt.io/workloadUpdateMigration": ""}
    assert manifest["spec"] == {"vmiName": "vm", "priority": "user-triggered"}


def test_workload_update_methods_gate_the_hotplug_migration() -> None:
    def with_methods(methods: Any) -> ClusterConfig:
        kubevirt = {"metadata": {"name": "kubevirt"}, "spec": {"workloadUpdateStrategy": methods}}
        return cluster_config(kubevirt, CONFIG)

    assert live_migrate_allowed(CONFIG), "unset: hotplug migrations are made (see docs/architecture.md)"
    assert live_migrate_allowed(with_methods({"workloadUpdateMethods": ["LiveMigrate", "Evict"]}))
    assert not live_migrate_allowed(with_methods({"workloadUpdateMethods": []})), "KubeVirt: none listed, none made"
    assert not live_migrate_allowed(with_methods({"workloadUpdateMethods": ["Evict"]}))
    assert live_migrate_allowed(with_methods({}))


# ------------------------------------------------------------------------------------------------ launcher


def test_requested_vcpus_is_the_topology() -> None:
    assert requested_vcpus(running_vmi(sockets=2)) == 2


def test_virtio_mem_device_as_kubevirt_builds_it() -> None:
    xml = build_virtio_mem(running_vmi(guest="2Gi"))
    assert xml == (
        '<memory model="virtio-mem"><target>'
        f'<size unit="b">{3 * GI}</size><node>0</node><block unit="b">2097152</block>'
        f'<requested unit="b">{GI}</requested>'
        "</target></memory>"
    )
    assert device_sizes(running_vmi()) == (3 * GI, 0)


def test_virtio_mem_resize_keeps_the_device_and_drops_current() -> None:
    domain = (
        "<domain><devices><disk/><memory model='virtio-mem'><target><size unit='KiB'>3145728</size><node>0</node>"
        "<block unit='KiB'>2048</block><requested unit='KiB'>0</requested><current unit='KiB'>0</current></target>"
        "<alias name='virtiomem0'/></memory></devices></domain>"
    )
    device = virtio_mem_device(domain)
    assert device is not None
    updated = ET.fromstring(with_requested(device, GI))
    assert updated.findtext("target/requested") == str(GI) and updated.find("target/requested").get("unit") == "b"
    assert updated.find("target/current") is None and updated.find("alias") is not None
    assert virtio_mem_device("<domain><devices/></domain>") is None


def test_guest_current_follows_the_domains_current_memory() -> None:
    vmi = running_vmi(guest="2Gi")
    assert memory_changes(vmi, {"currentMemory": 2 * GI}) == {
        "memory": {"guestAtBoot": "1Gi", "guestCurrent": "2Gi", "guestRequested": "1Gi"}
    }
    assert memory_changes(vmi, {"currentMemory": GI}) == {}, "already shown"
    assert memory_changes(vmi, {}) == {}
    del vmi["spec"]["domain"]["memory"]["maxGuest"]
    assert memory_changes(vmi, {"currentMemory": 2 * GI}) == {}, "only for a VMI with memory hotplug"
