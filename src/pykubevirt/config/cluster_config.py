"""The KubeVirt CR's configuration as the components read it; defaults are KubeVirt's (pkg/virt-config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.config.feature_gates import gate_enabled
from pykubevirt.log import DEFAULT_VERBOSITY


@dataclass(frozen=True, slots=True)
class MigrationConfig:
    """spec.configuration.migrations; defaults are KubeVirt's (pkg/virt-config: NewDefaultMigrationConfiguration)."""

    parallel_migrations_per_cluster: int = 5
    parallel_outbound_migrations_per_node: int = 2
    bandwidth_per_migration: str = "0Mi"
    completion_timeout_per_gib: int = 150
    progress_timeout: int = 150
    unsafe_migration_override: bool = False
    allow_auto_converge: bool = False
    allow_post_copy: bool = False
    # Unset follows allow_post_copy (KubeVirt's backward-compatible reading of the field).
    allow_workload_disruption: bool | None = None
    disable_tls: bool = False
    network: str | None = None
    max_downtime_ms: int = 900
    utility_volumes_timeout: int = 150
    node_drain_taint_key: str = "kubevirt.io/drain"
    match_selinux_level_on_migration: bool | None = None


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The parts of the KubeVirt CR's configuration the components read; defaults are KubeVirt's (pkg/virt-config)."""

    architecture: str = "amd64"
    feature_gates: frozenset[str] = frozenset()
    disabled_feature_gates: frozenset[str] = frozenset()
    network_interface: str = "bridge"
    permit_bridge_interface_on_pod_network: bool = True
    permit_slirp_interface: bool = False
    cpu_model: str | None = None
    cpu_request: str | None = None
    memory_overcommit: int = 100
    cpu_allocation_ratio: int = 10
    vm_rollout_strategy: str = "LiveUpdate"
    max_hotplug_ratio: int = 4
    max_cpu_sockets: int | None = None
    max_guest: str | None = None
    eviction_strategy: str | None = None
    emulated_machines: tuple[str, ...] = ("q35*", "pc-q35*")
    mem_balloon_stats_period: int = 10
    smbios_family: str = "KubeVirt"
    smbios_manufacturer: str = "KubeVirt"
    smbios_product: str = "None"
    # `virtualMachineOptions.disableSerialConsoleLog` (an empty object when set): no guest-console-log by default.
    disable_serial_console_log: bool = False
    # `vmStateStorageClass`: the class of backend-storage claims (persistent EFI/TPM); "" means the default class.
    vm_state_storage_class: str = ""
    # `ksmConfiguration.nodeLabelSelector`: {} selects every node, none (or an invalid one) no node; None: no KSM.
    ksm_node_selector: LabelSelector | None = None
    migrations: MigrationConfig = field(default_factory=MigrationConfig)
    # The KubeVirt CR's `spec.workloadUpdateStrategy.workloadUpdateMethods` (None: not set). KubeVirt's workload
    # updater migrates only with `LiveMigrate` listed; unset, this one migrates for hotplug anyway (docs/architecture).
    workload_update_methods: frozenset[str] | None = None
    # `developerConfiguration.logVerbosity`: (component field, verbosity) pairs, and nodeVerbosity's (node, verbosity).
    log_verbosity: tuple[tuple[str, int], ...] = ()
    node_verbosity: tuple[tuple[str, int], ...] = ()

    def gate_enabled(self, name: str) -> bool:
        return gate_enabled(name, self.feature_gates, self.disabled_feature_gates)

    def verbosity(self, component: str, node: str = "") -> int:
        """getComponentVerbosity: the node's level, else the component's (`virtHandler`, …), else the default 2."""
        if node:
            level = dict(self.node_verbosity).get(node, 0)
            if level:
                return level
        # An explicit 0 is a level of its own, as in KubeVirt (whose defaults are 2 for fields the object leaves out).
        return dict(self.log_verbosity).get(component, DEFAULT_VERBOSITY)
