"""What admission knows besides the object: the cluster configuration, the caller, and read-only lookups."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykubevirt.admission.feature_gates import gate_enabled

# Service accounts whose writes to VMIs are KubeVirt's own (controller, handler, api).
KUBEVIRT_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:kubevirt:"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The parts of the KubeVirt CR's configuration admission reads; defaults are KubeVirt's (pkg/virt-config)."""

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

    def gate_enabled(self, name: str) -> bool:
        return gate_enabled(name, self.feature_gates, self.disabled_feature_gates)


class ObjectLookup(Protocol):
    """Read-only access to other objects (instancetypes, preferences, VMIs, migrations) during admission."""

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]: ...


class NoLookup:
    """A lookup that knows no objects (offline validation of manifests)."""

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        return []


@dataclass(frozen=True, slots=True)
class AdmissionContext:
    """Everything an admission function may consult; it never performs I/O itself."""

    config: ClusterConfig = field(default_factory=ClusterConfig)
    lookup: ObjectLookup = field(default_factory=NoLookup)
    username: str = "kubernetes-admin"
    now: Callable[[], str] | None = None
    random_uuid: Callable[[], str] | None = None

    def is_kubevirt_service_account(self) -> bool:
        return self.username.startswith(KUBEVIRT_SERVICE_ACCOUNT_PREFIX)
