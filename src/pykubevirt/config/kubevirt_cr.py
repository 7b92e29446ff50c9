"""The one place that reads the KubeVirt CR's spec.configuration into a ClusterConfig.

As KubeVirt's virt-config (`pkg/virt-config/config-map.go: setConfigFromKubeVirt`), the components take their
configuration from the cluster's KubeVirt object; a field the object leaves unset keeps the value the command line
gave (or KubeVirt's default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from pykubevirt.api.json_lookup import as_map, get
from pykubevirt.api.label_selectors import stored_selector
from pykubevirt.api.objects import is_marked_for_deletion, metadata
from pykubevirt.config.cluster_config import ClusterConfig, MigrationConfig

# The bindings upstream's validateConfig accepts as the default network interface.
_NETWORK_INTERFACES = frozenset({"bridge", "slirp", "masquerade"})


def _strings(value: Any) -> frozenset[str] | None:
    return frozenset(str(v) for v in value) if isinstance(value, list) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _level(value: Any) -> bool:
    """A verbosity the components take: an unsigned integer (uint in KubeVirt's type)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _quantity(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None


def active_kubevirt(objects: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The KubeVirt object in effect: the oldest one not being deleted (`GetConfigFromKubeVirtCR`).

    Upstream also skips objects whose status.phase is empty, which only its operator sets; there is no operator
    here, so an object counts from its creation.
    """
    live = [o for o in objects if not is_marked_for_deletion(o)]
    live.sort(key=lambda o: (str(metadata(o).get("creationTimestamp") or ""), str(metadata(o).get("name") or "")))
    return live[0] if live else None


def _migrations(raw: Mapping[str, Any], defaults: MigrationConfig) -> MigrationConfig:
    fields: dict[str, Any] = {
        "parallel_migrations_per_cluster": _int(raw.get("parallelMigrationsPerCluster")),
        "parallel_outbound_migrations_per_node": _int(raw.get("parallelOutboundMigrationsPerNode")),
        "bandwidth_per_migration": _quantity(raw.get("bandwidthPerMigration")),
        "completion_timeout_per_gib": _int(raw.get("completionTimeoutPerGiB")),
        "progress_timeout": _int(raw.get("progressTimeout")),
        "unsafe_migration_override": _bool(raw.get("unsafeMigrationOverride")),
        "allow_auto_converge": _bool(raw.get("allowAutoConverge")),
        "allow_post_copy": _bool(raw.get("allowPostCopy")),
        "allow_workload_disruption": _bool(raw.get("allowWorkloadDisruption")),
        "disable_tls": _bool(raw.get("disableTLS")),
        "network": _str(raw.get("network")),
        "max_downtime_ms": _int(raw.get("maxDowntimeMs")),
        "utility_volumes_timeout": _int(raw.get("utilityVolumesTimeout")),
        "node_drain_taint_key": _str(raw.get("nodeDrainTaintKey")),
        "match_selinux_level_on_migration": _bool(raw.get("matchSELinuxLevelOnMigration")),
    }
    return dataclasses.replace(defaults, **{k: v for k, v in fields.items() if v is not None})


def invalid_reason(config: ClusterConfig) -> str | None:
    """Why upstream's `validateConfig` would refuse this configuration, or None."""
    if config.memory_overcommit <= 0:
        return f"invalid memoryOvercommit: {config.memory_overcommit}"
    if config.cpu_allocation_ratio <= 0:
        return f"invalid cpuAllocationRatio: {config.cpu_allocation_ratio}"
    if config.network_interface not in _NETWORK_INTERFACES:
        return f"invalid defaultNetworkInterface: {config.network_interface}"
    if config.mem_balloon_stats_period < 0:
        return f"invalid memBalloonStatsPeriod (negative): {config.mem_balloon_stats_period}"
    return None


def cluster_config(kubevirt: Mapping[str, Any] | None, defaults: ClusterConfig) -> ClusterConfig:
    """`defaults` with every field the KubeVirt object's spec.configuration sets taken from it.

    An invalid configuration is not applied at all, as upstream falls back to its last valid one.
    """
    if kubevirt is None:
        return defaults
    conf = as_map(get(kubevirt, "spec", "configuration"))
    developer = as_map(conf.get("developerConfiguration"))
    network = as_map(conf.get("network"))
    live_update = as_map(conf.get("liveUpdateConfiguration"))
    smbios = as_map(conf.get("smbios"))
    vm_options = as_map(conf.get("virtualMachineOptions"))
    architecture = _str(get(conf, "architectureConfiguration", "defaultArchitecture"))
    arch = architecture or defaults.architecture
    machines = _strings(get(conf, "architectureConfiguration", arch, "emulatedMachines"))
    if machines is None:
        machines = _strings(conf.get("emulatedMachines"))
    fields: dict[str, Any] = {
        "architecture": architecture,
        "feature_gates": _strings(developer.get("featureGates")),
        "disabled_feature_gates": _strings(developer.get("disabledFeatureGates")),
        "memory_overcommit": _int(developer.get("memoryOvercommit")),
        "cpu_allocation_ratio": _int(developer.get("cpuAllocationRatio")),
        "network_interface": _str(network.get("defaultNetworkInterface")),
        "permit_bridge_interface_on_pod_network": _bool(network.get("permitBridgeInterfaceOnPodNetwork")),
        "permit_slirp_interface": _bool(network.get("permitSlirpInterface")),
        "cpu_model": _str(conf.get("cpuModel")),
        "cpu_request": _quantity(conf.get("cpuRequest")),
        "vm_rollout_strategy": _str(conf.get("vmRolloutStrategy")),
        "max_hotplug_ratio": _int(live_update.get("maxHotplugRatio")),
        "max_cpu_sockets": _int(live_update.get("maxCpuSockets")),
        "max_guest": _quantity(live_update.get("maxGuest")),
        "eviction_strategy": _str(conf.get("evictionStrategy")),
        "emulated_machines": tuple(sorted(machines)) if machines is not None else None,
        "mem_balloon_stats_period": _int(conf.get("memBalloonStatsPeriod")),
        "smbios_family": _str(smbios.get("family")),
        "smbios_manufacturer": _str(smbios.get("manufacturer")),
        "smbios_product": _str(smbios.get("product")),
        "vm_state_storage_class": _str(conf.get("vmStateStorageClass")),
        # Set means an object ({}), which is what turns the serial console log off.
        "disable_serial_console_log": True if isinstance(vm_options.get("disableSerialConsoleLog"), Mapping) else None,
    }
    levels = as_map(developer.get("logVerbosity"))
    fields["log_verbosity"] = tuple(sorted((k, v) for k, v in levels.items() if k != "nodeVerbosity" and _level(v)))
    nodes = as_map(levels.get("nodeVerbosity"))
    fields["node_verbosity"] = tuple(sorted((k, v) for k, v in nodes.items() if _level(v)))
    if isinstance(conf.get("migrations"), Mapping):
        fields["migrations"] = _migrations(conf["migrations"], defaults.migrations)
    if isinstance(conf.get("ksmConfiguration"), Mapping):
        fields["ksm_node_selector"] = stored_selector(conf["ksmConfiguration"].get("nodeLabelSelector"))
    fields["workload_update_methods"] = _strings(
        get(kubevirt, "spec", "workloadUpdateStrategy", "workloadUpdateMethods")
    )
    config = dataclasses.replace(defaults, **{k: v for k, v in fields.items() if v is not None})
    return defaults if invalid_reason(config) is not None else config


class ConfigFromKubeVirt:
    """`cluster_config` of the KubeVirt object in effect, parsed again only when that object changes.

    As upstream's `GetConfig`, which keeps the configuration of the last resourceVersion it parsed.
    """

    def __init__(self, defaults: ClusterConfig) -> None:
        self.defaults = defaults
        self._parsed: tuple[str, str] | None = None
        self._config = defaults

    def __call__(self, objects: Iterable[Mapping[str, Any]]) -> ClusterConfig:
        kubevirt = active_kubevirt(objects)
        if kubevirt is None:
            self._parsed, self._config = None, self.defaults
            return self.defaults
        meta = metadata(kubevirt)
        parsed = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        if parsed != self._parsed or not parsed[1]:
            self._parsed, self._config = parsed, cluster_config(kubevirt, self.defaults)
        return self._config
