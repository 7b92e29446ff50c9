"""KubeVirt feature gates and their maturity; enablement follows KubeVirt's precedence rules."""

from __future__ import annotations

import enum
from collections.abc import Iterable


class GateState(enum.Enum):
    ALPHA = "Alpha"
    BETA = "Beta"
    GA = "General Availability"
    DEPRECATED = "Deprecated"
    DISCONTINUED = "Discontinued"


# From KubeVirt's pkg/virt-config/featuregate at the reference commit.
GATES: dict[str, GateState] = {
    "ImageVolume": GateState.BETA,
    "CPUManager": GateState.ALPHA,
    "ExperimentalIgnitionSupport": GateState.ALPHA,
    "HypervStrictCheck": GateState.ALPHA,
    "Sidecar": GateState.ALPHA,
    "HostDevices": GateState.ALPHA,
    "Snapshot": GateState.BETA,
    "HostDisk": GateState.ALPHA,
    "DownwardMetrics": GateState.ALPHA,
    "Root": GateState.ALPHA,
    "WorkloadEncryptionSEV": GateState.BETA,
    "WorkloadEncryptionTDX": GateState.ALPHA,
    "VSOCK": GateState.ALPHA,
    "KubevirtSeccompProfile": GateState.BETA,
    "AlignCPUs": GateState.ALPHA,
    "NodeRestriction": GateState.BETA,
    "EnableVirtioFsStorageVolumes": GateState.ALPHA,
    "GPUsWithDRA": GateState.BETA,
    "HostDevicesWithDRA": GateState.BETA,
    "PCINUMAAwareTopology": GateState.ALPHA,
    "NetworkDevicesWithDRA": GateState.ALPHA,
    "DecentralizedLiveMigration": GateState.BETA,
    "DeclarativeHotplugVolumes": GateState.BETA,
    "ObjectGraph": GateState.ALPHA,
    "UtilityVolumes": GateState.ALPHA,
    "ConfigurableHypervisor": GateState.ALPHA,
    "PasstBinding": GateState.BETA,
    "IncrementalBackup": GateState.ALPHA,
    "PodSecondaryInterfaceNamingUpgrade": GateState.BETA,
    "ExternalNetResourceInjection": GateState.BETA,
    "RebootPolicy": GateState.BETA,
    "Template": GateState.BETA,
    "ContainerPathVolumes": GateState.ALPHA,
    "ReservedOverheadMemlock": GateState.ALPHA,
    "OptOutRoleAggregation": GateState.BETA,
    "VGPULiveMigration": GateState.ALPHA,
    "VMStatsCollector": GateState.ALPHA,
    "OCIExport": GateState.ALPHA,
    "Plugins": GateState.ALPHA,
    "MigrationStallDetection": GateState.ALPHA,
    "MigrationDowntimeTuning": GateState.ALPHA,
    "CrossArchitectureVirtualization": GateState.ALPHA,
    "PortRangesSpec": GateState.ALPHA,
    "LiveMigration": GateState.GA,
    "SRIOVLiveMigration": GateState.GA,
    "NonRoot": GateState.GA,
    "PSA": GateState.GA,
    "CPUNodeDiscovery": GateState.GA,
    "NUMA": GateState.GA,
    "CommonInstancetypesDeploymentGate": GateState.GA,
    "GPU": GateState.GA,
    "HotplugNICs": GateState.GA,
    "BochsDisplayForEFIGuests": GateState.GA,
    "VMLiveUpdateFeatures": GateState.GA,
    "NetworkBindingPlugins": GateState.GA,
    "DynamicPodInterfaceNaming": GateState.GA,
    "VolumesUpdateStrategy": GateState.GA,
    "VolumeMigration": GateState.GA,
    "DisableCustomSELinuxPolicy": GateState.GA,
    "AutoResourceLimitsGate": GateState.GA,
    "ClusterProfiler": GateState.GA,
    "VMPersistentState": GateState.GA,
    "VMExport": GateState.GA,
    "PersistentReservation": GateState.GA,
    "InstancetypeReferencePolicy": GateState.GA,
    "EnableVirtioFsConfigVolumes": GateState.GA,
    "ExpandDisks": GateState.GA,
    "PanicDevices": GateState.GA,
    "LiveUpdateNADRef": GateState.GA,
    "VideoConfig": GateState.GA,
    "SecureExecution": GateState.GA,
    "MigrationPriorityQueue": GateState.GA,
    "VmiMemoryOverheadReport": GateState.GA,
    "LibvirtHooksServerAndClient": GateState.GA,
    "DockerSELinuxMCSWorkaround": GateState.DEPRECATED,
    "MultiArchitecture": GateState.DEPRECATED,
    "DisableMDEVConfiguration": GateState.DEPRECATED,
    "HotplugVolumes": GateState.DEPRECATED,
    "ExperimentalVirtiofsSupport": GateState.DISCONTINUED,
    "Passt": GateState.DISCONTINUED,
    "Macvtap": GateState.DISCONTINUED,
    "PasstIPStackMigration": GateState.DISCONTINUED,
}


def gate_enabled(name: str, enabled: Iterable[str] = (), disabled: Iterable[str] = ()) -> bool:
    """GA is always on, then an explicit enable, then an explicit disable, then Beta on by default, else off."""
    state = GATES.get(name)
    if state is GateState.GA:
        return True
    if state is GateState.DISCONTINUED:
        return False
    if name in set(enabled):
        return True
    if name in set(disabled):
        return False
    return state is GateState.BETA
