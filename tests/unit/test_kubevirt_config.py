"""The KubeVirt CR's spec.configuration read into a ClusterConfig, with the command line's values as defaults."""

from __future__ import annotations

from typing import Any

from pykubevirt.config.cluster_config import ClusterConfig, MigrationConfig
from pykubevirt.config.kubevirt_cr import ConfigFromKubeVirt, active_kubevirt, cluster_config

FLAGS = ClusterConfig(feature_gates=frozenset({"FromFlag"}))


def kubevirt(configuration: dict[str, Any], name: str = "kubevirt", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": name, "namespace": "kubevirt", **meta},
        "spec": {"configuration": configuration},
    }


def test_without_a_kubevirt_object_the_flags_hold() -> None:
    assert cluster_config(None, FLAGS) is FLAGS


def test_an_empty_configuration_keeps_every_default() -> None:
    assert cluster_config(kubevirt({}), FLAGS) == FLAGS
    assert cluster_config({"spec": {}}, FLAGS) == FLAGS


def test_feature_gates_come_from_the_developer_configuration() -> None:
    config = cluster_config(
        kubevirt({"developerConfiguration": {"featureGates": ["HostDisk"], "disabledFeatureGates": ["ImageVolume"]}}),
        FLAGS,
    )
    assert config.feature_gates == frozenset({"HostDisk"})
    assert config.disabled_feature_gates == frozenset({"ImageVolume"})
    assert config.gate_enabled("HostDisk")
    assert not config.gate_enabled("FromFlag")
    # An empty list is a setting too: no gate enabled.
    assert (
        cluster_config(kubevirt({"developerConfiguration": {"featureGates": []}}), FLAGS).feature_gates == frozenset()
    )


def test_disable_serial_console_log_is_set_by_an_empty_object() -> None:
    config = cluster_config(kubevirt({"virtualMachineOptions": {"disableSerialConsoleLog": {}}}), FLAGS)
    assert config.disable_serial_console_log is True
    assert cluster_config(kubevirt({"virtualMachineOptions": {}}), FLAGS).disable_serial_console_log is False


def test_scalar_options() -> None:
    config = cluster_config(
        kubevirt(
            {
                "evictionStrategy": "LiveMigrate",
                "vmRolloutStrategy": "Stage",
                "cpuModel": "host-passthrough",
                "cpuRequest": "200m",
                "memBalloonStatsPeriod": 0,
                "developerConfiguration": {"memoryOvercommit": 150, "cpuAllocationRatio": 20},
                "network": {"defaultNetworkInterface": "masquerade", "permitSlirpInterface": True},
                "liveUpdateConfiguration": {"maxHotplugRatio": 2, "maxCpuSockets": 8, "maxGuest": "16Gi"},
                "smbios": {"manufacturer": "Acme"},
            }
        ),
        FLAGS,
    )
    assert config.eviction_strategy == "LiveMigrate"
    assert config.vm_rollout_strategy == "Stage"
    assert config.cpu_model == "host-passthrough"
    assert config.cpu_request == "200m"
    assert config.mem_balloon_stats_period == 0
    assert (config.memory_overcommit, config.cpu_allocation_ratio) == (150, 20)
    assert config.network_interface == "masquerade"
    assert config.permit_slirp_interface is True
    assert config.permit_bridge_interface_on_pod_network is True
    assert (config.max_hotplug_ratio, config.max_cpu_sockets, config.max_guest) == (2, 8, "16Gi")
    assert (config.smbios_manufacturer, config.smbios_family) == ("Acme", "KubeVirt")
    assert config.feature_gates == FLAGS.feature_gates


def test_values_of_the_wrong_type_are_ignored() -> None:
    config = cluster_config(
        kubevirt(
            {"evictionStrategy": 3, "memBalloonStatsPeriod": True, "developerConfiguration": {"featureGates": "X"}}
        ),
        FLAGS,
    )
    assert config == FLAGS


def test_migrations() -> None:
    config = cluster_config(
        kubevirt(
            {"migrations": {"parallelMigrationsPerCluster": 1, "bandwidthPerMigration": "64Mi", "allowPostCopy": True}}
        ),
        FLAGS,
    )
    assert config.migrations == MigrationConfig(
        parallel_migrations_per_cluster=1, bandwidth_per_migration="64Mi", allow_post_copy=True
    )
    assert FLAGS.migrations == MigrationConfig()


def test_emulated_machines_per_architecture_win_over_the_legacy_list() -> None:
    arch = {"architectureConfiguration": {"amd64": {"emulatedMachines": ["q35"]}}, "emulatedMachines": ["pc*"]}
    assert cluster_config(kubevirt(arch), FLAGS).emulated_machines == ("q35",)
    assert cluster_config(kubevirt({"emulatedMachines": ["pc*"]}), FLAGS).emulated_machines == ("pc*",)


def test_the_oldest_live_kubevirt_object_is_in_effect() -> None:
    old = kubevirt({}, "old", creationTimestamp="2026-01-01T00:00:00Z")
    new = kubevirt({}, "new", creationTimestamp="2026-02-01T00:00:00Z")
    deleting = kubevirt({}, "older", creationTimestamp="2025-01-01T00:00:00Z", deletionTimestamp="2026-03-01T00:00:00Z")
    # No operator sets status.phase here, so an object without one counts (upstream waits for the phase).
    assert "status" not in old
    assert active_kubevirt([new, deleting, old]) is old
    assert active_kubevirt([deleting]) is None
    assert active_kubevirt([]) is None


def test_an_invalid_configuration_is_not_applied_at_all() -> None:
    for bad in (
        {"developerConfiguration": {"memoryOvercommit": 0, "featureGates": ["HostDisk"]}},
        {"developerConfiguration": {"cpuAllocationRatio": -1}},
        {"network": {"defaultNetworkInterface": "sriov"}},
        {"memBalloonStatsPeriod": -5},
    ):
        assert cluster_config(kubevirt(bad), FLAGS) == FLAGS, bad


def test_the_configuration_is_parsed_again_only_when_the_object_changes() -> None:
    config = ConfigFromKubeVirt(FLAGS)
    first = kubevirt({"evictionStrategy": "None"}, uid="u1", resourceVersion="5")
    parsed = config([first])
    assert parsed.eviction_strategy == "None"
    assert config([first]) is parsed
    changed = kubevirt({"evictionStrategy": "LiveMigrate"}, uid="u1", resourceVersion="6")
    assert config([changed]).eviction_strategy == "LiveMigrate"
    assert config([]) is FLAGS
