"""Names KubeVirt gives its groups, labels, annotations, finalizers, phases and reasons.

Most come from staging/src/kubevirt.io/api/core/v1/types.go (labels, annotations, finalizers, phases, reasons).
"""

from __future__ import annotations

from typing import Final

# API groups and versions.
KUBEVIRT_GROUP: Final = "kubevirt.io"
KUBEVIRT_VERSION: Final = "v1"
KUBEVIRT_API_VERSION: Final = "kubevirt.io/v1"
INSTANCETYPE_GROUP: Final = "instancetype.kubevirt.io"
INSTANCETYPE_VERSION: Final = "v1beta1"
INSTANCETYPE_API_VERSION: Final = "instancetype.kubevirt.io/v1beta1"
CDI_GROUP: Final = "cdi.kubevirt.io"
CDI_VERSION: Final = "v1beta1"
CDI_API_VERSION: Final = "cdi.kubevirt.io/v1beta1"
SUBRESOURCES_GROUP: Final = "subresources.kubevirt.io"
POOL_GROUP: Final = "pool.kubevirt.io"
POOL_VERSION: Final = "v1beta1"
# KubeVirt serves pools as v1alpha1 too, not deprecated.
POOL_OLDER_VERSION: Final = "v1alpha1"
POOL_API_VERSION: Final = "pool.kubevirt.io/v1beta1"
SNAPSHOT_GROUP: Final = "snapshot.kubevirt.io"
SNAPSHOT_VERSION: Final = "v1beta1"
# KubeVirt serves snapshots and restores as v1alpha1 too, not deprecated.
SNAPSHOT_OLDER_VERSION: Final = "v1alpha1"
SNAPSHOT_API_VERSION: Final = "snapshot.kubevirt.io/v1beta1"
CLONE_GROUP: Final = "clone.kubevirt.io"
CLONE_VERSION: Final = "v1beta1"
CLONE_API_VERSION: Final = "clone.kubevirt.io/v1beta1"
EXPORT_GROUP: Final = "export.kubevirt.io"
EXPORT_VERSION: Final = "v1"
EXPORT_OLDER_VERSION: Final = "v1beta1"
EXPORT_API_VERSION: Final = "export.kubevirt.io/v1"
# The CSI snapshot API (kubernetes-csi/external-snapshotter) the embedded storage serves.
VOLUME_SNAPSHOT_GROUP: Final = "snapshot.storage.k8s.io"
VOLUME_SNAPSHOT_VERSION: Final = "v1"

# Kinds.
VM_KIND: Final = "VirtualMachine"
VMI_KIND: Final = "VirtualMachineInstance"
VMIM_KIND: Final = "VirtualMachineInstanceMigration"
VMIRS_KIND: Final = "VirtualMachineInstanceReplicaSet"
VM_POOL_KIND: Final = "VirtualMachinePool"
INSTANCETYPE_KIND: Final = "VirtualMachineInstancetype"
CLUSTER_INSTANCETYPE_KIND: Final = "VirtualMachineClusterInstancetype"
PREFERENCE_KIND: Final = "VirtualMachinePreference"
CLUSTER_PREFERENCE_KIND: Final = "VirtualMachineClusterPreference"
DATA_VOLUME_KIND: Final = "DataVolume"
DATA_SOURCE_KIND: Final = "DataSource"
KUBEVIRT_KIND: Final = "KubeVirt"
VM_SNAPSHOT_KIND: Final = "VirtualMachineSnapshot"
VM_SNAPSHOT_CONTENT_KIND: Final = "VirtualMachineSnapshotContent"
VM_RESTORE_KIND: Final = "VirtualMachineRestore"
VM_CLONE_KIND: Final = "VirtualMachineClone"
VM_EXPORT_KIND: Final = "VirtualMachineExport"
VOLUME_SNAPSHOT_KIND: Final = "VolumeSnapshot"
VOLUME_SNAPSHOT_CONTENT_KIND: Final = "VolumeSnapshotContent"
VOLUME_SNAPSHOT_CLASS_KIND: Final = "VolumeSnapshotClass"

# Grace period used when a VMI sets none.
DEFAULT_GRACE_PERIOD_SECONDS: Final = 30

# Finalizers.
VM_CONTROLLER_FINALIZER: Final = "kubevirt.io/virtualMachineControllerFinalize"
# On a VirtualMachinePool and on each VM it made, until the pool controller lets go of it.
VM_POOL_FINALIZER: Final = "pool.kubevirt.io/finalizer"
VMI_FINALIZER: Final = "kubevirt.io/foregroundDeleteVirtualMachine"
LEGACY_VMI_FINALIZER: Final = "foregroundDeleteVirtualMachine"
MIGRATION_FINALIZER: Final = "kubevirt.io/migrationJobFinalize"

# Labels.
APP_LABEL: Final = "kubevirt.io"
CREATED_BY_LABEL: Final = "kubevirt.io/created-by"
# The pool revision (ControllerRevision) a pool VM and its VMI were made from.
VM_POOL_REVISION_LABEL: Final = "kubevirt.io/vm-pool-revision-name"
NODE_NAME_LABEL: Final = "kubevirt.io/nodeName"
MIGRATION_TARGET_NODE_NAME_LABEL: Final = "kubevirt.io/migrationTargetNodeName"
MIGRATION_JOB_UID_LABEL: Final = "kubevirt.io/migrationJobUID"
NODE_SCHEDULABLE_LABEL: Final = "kubevirt.io/schedulable"
INSTALL_STRATEGY_LABEL: Final = "kubevirt.io/install-strategy"
VM_NAME_LABEL: Final = "vm.kubevirt.io/name"
VMI_ID_LABEL: Final = "vmi.kubevirt.io/id"
VMI_NAME_LABEL: Final = "kubevirt.io/vmi-name"

RESERVED_VMI_LABELS: Final = (
    CREATED_BY_LABEL,
    MIGRATION_JOB_UID_LABEL,
    NODE_NAME_LABEL,
    MIGRATION_TARGET_NODE_NAME_LABEL,
    NODE_SCHEDULABLE_LABEL,
    INSTALL_STRATEGY_LABEL,
)

# Kubernetes' non-graceful node shutdown: a node carrying this taint is known to run nothing any more.
OUT_OF_SERVICE_TAINT: Final = "node.kubernetes.io/out-of-service"

# Annotations.
VM_GENERATION_ANNOTATION: Final = "kubevirt.io/vm-generation"
LATEST_OBSERVED_API_VERSION_ANNOTATION: Final = "kubevirt.io/latest-observed-api-version"
STORAGE_OBSERVED_API_VERSION_ANNOTATION: Final = "kubevirt.io/storage-observed-api-version"
HEARTBEAT_ANNOTATION: Final = "kubevirt.io/heartbeat"
# Where virt-api reaches a node's virt-handler (KubeVirt finds it through the handler pod's IP instead).
HANDLER_ADDRESS_ANNOTATION: Final = "pykubevirt.io/virt-handler-address"
# What virt-handler serves per VMI at that address, `<path>/<action>` (KubeVirt's handler port 8186); virt-api calls it.
HANDLER_VMI_PATH: Final = "/v1/namespaces/{namespace}/virtualmachineinstances/{name}"
DOMAIN_ANNOTATION: Final = "kubevirt.io/domain"
CREATE_MIGRATION_TARGET_ANNOTATION: Final = "kubevirt.io/create-migration-target"
PCI_TOPOLOGY_VERSION_ANNOTATION: Final = "kubevirt.io/pci-topology-version"
PCI_TOPOLOGY_VERSION: Final = "v3"
MIGRATION_TRANSPORT_UNIX_ANNOTATION: Final = "kubevirt.io/migrationTransportUnix"
MEMORY_OVERHEAD_ANNOTATION: Final = "kubevirt.io/memory-overhead-bytes"
INSTANCETYPE_NAME_ANNOTATION: Final = "kubevirt.io/instancetype-name"
CLUSTER_INSTANCETYPE_NAME_ANNOTATION: Final = "kubevirt.io/cluster-instancetype-name"
PREFERENCE_NAME_ANNOTATION: Final = "kubevirt.io/preference-name"
CLUSTER_PREFERENCE_NAME_ANNOTATION: Final = "kubevirt.io/cluster-preference-name"

# Run strategies.
RUN_STRATEGY_ALWAYS: Final = "Always"
RUN_STRATEGY_HALTED: Final = "Halted"
RUN_STRATEGY_MANUAL: Final = "Manual"
RUN_STRATEGY_RERUN_ON_FAILURE: Final = "RerunOnFailure"
RUN_STRATEGY_ONCE: Final = "Once"
RUN_STRATEGY_WAIT_AS_RECEIVER: Final = "WaitAsReceiver"
RUN_STRATEGIES: Final = (
    RUN_STRATEGY_ALWAYS,
    RUN_STRATEGY_HALTED,
    RUN_STRATEGY_MANUAL,
    RUN_STRATEGY_RERUN_ON_FAILURE,
    RUN_STRATEGY_ONCE,
    RUN_STRATEGY_WAIT_AS_RECEIVER,
)

# VMI phases.
PHASE_UNSET: Final = ""
PHASE_PENDING: Final = "Pending"
PHASE_SCHEDULING: Final = "Scheduling"
PHASE_SCHEDULED: Final = "Scheduled"
PHASE_RUNNING: Final = "Running"
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
PHASE_WAITING_FOR_SYNC: Final = "WaitingForSync"
PHASE_UNKNOWN: Final = "Unknown"
VMI_PHASES: Final = (
    PHASE_PENDING,
    PHASE_SCHEDULING,
    PHASE_SCHEDULED,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    PHASE_FAILED,
    PHASE_WAITING_FOR_SYNC,
    PHASE_UNKNOWN,
)
FINAL_PHASES: Final = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})

# VM printable statuses: staging/src/kubevirt.io/api/core/v1/types.go: VirtualMachinePrintableStatus.
PRINTABLE_STATUSES: Final = (
    "Stopped",
    "Provisioning",
    "Starting",
    "Running",
    "Paused",
    "Stopping",
    "Terminating",
    "CrashLoopBackOff",
    "Migrating",
    "Unknown",
    "ErrorUnschedulable",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrorPvcNotFound",
    "DataVolumeError",
    "WaitingForVolumeBinding",
    "WaitingForReceiver",
)

# Migration phases.
MIGRATION_PHASES: Final = (
    "Pending",
    "Scheduling",
    "Scheduled",
    "PreparingTarget",
    "TargetReady",
    "Running",
    "Succeeded",
    "Failed",
    "WaitingForSync",
    "Synchronizing",
)

# Launcher pod.
LAUNCHER_LABEL_VALUE: Final = "virt-launcher"
LAUNCHER_COMPUTE_CONTAINER: Final = "compute"
UNPAUSED_READINESS_GATE: Final = "kubevirt.io/virtual-machine-unpaused"

# Legacy firmware UUIDs are UUIDv5(this namespace, vmi name).
FIRMWARE_UUID_NAMESPACE: Final = "6a1a24a1-4061-4607-8bf4-a3963d0c5895"
