"""VirtualMachineInstanceMigration, and the migration state it shares with the VMI status."""

from __future__ import annotations

from pykubevirt.api.constants import KUBEVIRT_API_VERSION, MIGRATION_PHASES, VMIM_KIND
from pykubevirt.api.kubevirt import conditions, nullable, phase_transition_timestamps, plain_integer
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    int64,
    integer,
    map_of,
    obj,
    quantity,
    string,
    string_map,
    timestamp,
)

_STALL_DETECTOR = obj(
    {
        "completionTimeoutFactor": quantity("Factor of the expected transfer time after which the migration aborts."),
        "ewmaAlpha": quantity("Smoothing factor of the moving average of the remaining data."),
        "patienceWindowDecayFactor": quantity("How fast the patience window shrinks."),
        "precopyPossibleFactor": quantity("Factor deciding whether pre-copy can still converge."),
        "searchLocalMinima": boolean("Look for a local minimum of remaining data before switching over."),
        "stallMargin": integer(
            "Percent of progress below which the migration counts as stalled.", format="int64", minimum=0, maximum=100
        ),
        "stallProgressTimeout": int64("Seconds without progress before a stall is declared.", minimum=0),
        "switchoverTimeout": int64("Seconds allowed for the switch-over.", minimum=0),
    },
    "Detection of migrations that stopped progressing.",
)

MIGRATION_CONFIGURATION: Schema = obj(
    {
        "allowAutoConverge": boolean("Throttle the guest vCPUs when the migration does not converge."),
        "allowPostCopy": boolean("Switch to post-copy when pre-copy does not converge."),
        "allowWorkloadDisruption": boolean("Allow pausing the guest to finish the migration."),
        "bandwidthPerMigration": quantity("Bandwidth limit of one migration per second; 0 means unlimited."),
        "completionTimeoutPerGiB": int64("Seconds per GiB of guest memory before the migration is cancelled."),
        "disableTLS": boolean("Send migration traffic without TLS."),
        "experimental": obj(
            {
                "compression": string("Compression of migration data: none or zstd.", enum=["none", "zstd"]),
                "downtimeTuning": obj(
                    {
                        "cooldownSeconds": integer("Seconds between downtime increases.", minimum=1),
                        "initialMs": integer("Initial allowed downtime in ms.", format="int64", minimum=1),
                        "startAfterIteration": integer(
                            "Copy iteration after which downtime grows.", format="int64", minimum=1
                        ),
                        "steps": integer("Number of downtime increases.", minimum=1),
                    },
                    "Gradual increase of the allowed downtime.",
                ),
                "stallDetector": _STALL_DETECTOR,
            },
            "Experimental migration tuning.",
        ),
        "matchSELinuxLevelOnMigration": boolean("Give the target pod the source pod's SELinux level."),
        "maxDowntimeMs": integer(
            "Longest pause allowed at switch-over, in ms.", format="int64", minimum=1, maximum=2000000
        ),
        "network": string("NetworkAttachmentDefinition carrying migration traffic."),
        "nodeDrainTaintKey": string("Taint key whose presence triggers migrating VMIs off a node."),
        "parallelMigrationsPerCluster": integer("Migrations allowed at once in the cluster."),
        "parallelOutboundMigrationsPerNode": integer("Outgoing migrations allowed at once per node."),
        "progressTimeout": int64("Seconds without progress before the migration is cancelled."),
        "unsafeMigrationOverride": boolean("Allow migrations KubeVirt considers unsafe."),
        "utilityVolumesTimeout": int64("Seconds to wait for utility volumes on the target."),
    },
    "The migration settings in effect.",
)

_COMMON_ENDPOINT_STATE: dict[str, Schema] = {
    "domainName": string("Libvirt domain name."),
    "domainNamespace": string("Namespace of the domain."),
    "migrationUID": string("UID of the migration object."),
    "node": string("Node name."),
    "persistentStatePVCName": string("Claim holding persistent VM state (TPM, EFI)."),
    "pod": string("Launcher pod name."),
    "selinuxContext": string("SELinux context of the launcher."),
    "syncAddress": string("Address used to synchronise a cross-cluster migration."),
    "virtualMachineInstanceUID": string("UID of the VMI on that side."),
}

_CPU_SET = array(plain_integer(), "Host CPUs the guest is pinned to.", list_type="atomic")
_NODE_PORTS = map_of(plain_integer(), "Ports of the direct migration proxy on the target node.")

SOURCE_STATE: Schema = obj(
    {**_COMMON_ENDPOINT_STATE, "nodeSelectors": string_map("Node selector of the source pod.")},
    "The source side of the migration.",
)

TARGET_STATE: Schema = obj(
    {
        **_COMMON_ENDPOINT_STATE,
        "attachmentPodUID": string("UID of the hotplug attachment pod on the target."),
        "cpuSet": _CPU_SET,
        "directMigrationNodePorts": _NODE_PORTS,
        "domainDetected": boolean("Whether the domain was seen on the target."),
        "domainReadyTimestamp": timestamp("When the target domain became ready."),
        "nodeAddress": string("Address of the target node."),
        "nodeTopology": string("CPU topology of the target node."),
    },
    "The target side of the migration.",
)

MIGRATION_STATE: Schema = obj(
    {
        "abortRequested": boolean("Whether an abort was requested."),
        "abortStatus": string("Succeeded, Failed or Aborting."),
        "completed": boolean("Whether the migration finished."),
        "endTimestamp": nullable(timestamp("When the migration ended.")),
        "failed": boolean("Whether the migration failed."),
        "failureReason": string("Why the migration failed."),
        "migrationConfiguration": MIGRATION_CONFIGURATION,
        "migrationNetworkType": string("Network the migration uses."),
        "migrationPolicyName": string("MigrationPolicy applied."),
        "migrationUid": string("UID of the migration object."),
        "mode": string("PreCopy or PostCopy."),
        "sourceNode": string("Node migrated from."),
        "sourcePersistentStatePVCName": string("Persistent state claim of the source."),
        "sourcePod": string("Launcher pod migrated from."),
        "sourceState": SOURCE_STATE,
        "startTimestamp": nullable(timestamp("When the migration started.")),
        "targetAttachmentPodUID": string("UID of the hotplug attachment pod on the target."),
        "targetCPUSet": _CPU_SET,
        "targetDirectMigrationNodePorts": _NODE_PORTS,
        "targetMemoryOverhead": quantity("Memory overhead of the target launcher."),
        "targetNode": string("Node migrated to."),
        "targetNodeAddress": string("Address of the target node."),
        "targetNodeDomainDetected": boolean("Whether the domain was seen on the target."),
        "targetNodeDomainReadyTimestamp": timestamp("When the target domain became ready."),
        "targetNodeTopology": string("CPU topology of the target node."),
        "targetPersistentStatePVCName": string("Persistent state claim of the target."),
        "targetPod": string("Launcher pod migrated to."),
        "targetState": TARGET_STATE,
    },
    "Progress of the current or last live migration.",
)

VMIM_SPEC: Schema = obj(
    {
        "addedNodeSelector": string_map("Node labels the target node must also carry."),
        "priority": string("Queue priority: system-critical, user-triggered or system-maintenance."),
        "receive": obj(
            {"migrationID": string("Identifier shared by both sides of the migration.")},
            "Receive a VMI from another cluster (decentralized live migration).",
            required=["migrationID"],
        ),
        "sendTo": obj(
            {
                "connectURL": string("Address of the receiving side's synchronisation endpoint."),
                "migrationID": string("Identifier shared by both sides of the migration."),
            },
            "Send the VMI to another cluster (decentralized live migration).",
            required=["connectURL", "migrationID"],
        ),
        "vmiName": string("Name of the VMI to migrate, in the same namespace."),
    },
    "Which VMI to migrate, and where.",
)

VMIM_STATUS: Schema = obj(
    {
        "conditions": conditions("Conditions of the migration."),
        "migrationState": MIGRATION_STATE,
        "phase": string(f"Phase of the migration: {', '.join(MIGRATION_PHASES)}."),
        "phaseTransitionTimestamps": phase_transition_timestamps("When each migration phase was entered."),
        "synchronizationAddresses": array(
            string(), "Addresses of the synchronisation endpoint (decentralized live migration).", list_type="atomic"
        ),
    },
    "Observed state of the migration.",
)

VIRTUAL_MACHINE_INSTANCE_MIGRATION: Schema = obj(
    {
        "apiVersion": string(f"API version: {KUBEVIRT_API_VERSION}."),
        "kind": string(f"Kind: {VMIM_KIND}."),
        "metadata": obj(),
        "spec": VMIM_SPEC,
        "status": VMIM_STATUS,
    },
    "A request to live-migrate one VirtualMachineInstance to another node.",
    required=["spec"],
)
