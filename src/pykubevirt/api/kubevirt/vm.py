"""VirtualMachine: a VMI template plus a run strategy, and the status the VM controller keeps."""

from __future__ import annotations

from pykubevirt.api.cdi import DATA_VOLUME_SPEC
from pykubevirt.api.constants import (
    CDI_API_VERSION,
    CLUSTER_INSTANCETYPE_KIND,
    CLUSTER_PREFERENCE_KIND,
    DATA_VOLUME_KIND,
    INSTANCETYPE_KIND,
    KUBEVIRT_API_VERSION,
    PREFERENCE_KIND,
    PRINTABLE_STATUSES,
    RUN_STRATEGY_ALWAYS,
    RUN_STRATEGY_HALTED,
    RUN_STRATEGY_MANUAL,
    RUN_STRATEGY_ONCE,
    RUN_STRATEGY_RERUN_ON_FAILURE,
    RUN_STRATEGY_WAIT_AS_RECEIVER,
    VM_KIND,
)
from pykubevirt.api.kubevirt import conditions, nullable, plain_integer
from pykubevirt.api.kubevirt.devices import DISK
from pykubevirt.api.kubevirt.vmi import VMI_SPEC
from pykubevirt.api.kubevirt.volumes import CHANGED_BLOCK_TRACKING_STATUS, HOTPLUG_VOLUME_SOURCE, MIGRATED_VOLUMES
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    describe,
    embedded_metadata,
    int64,
    obj,
    string,
    string_map,
    timestamp,
)

DATA_VOLUME_TEMPLATE: Schema = nullable(
    obj(
        {
            "apiVersion": string(f"API version of the DataVolume: {CDI_API_VERSION}."),
            "kind": string(f"Kind: {DATA_VOLUME_KIND}."),
            "metadata": nullable(embedded_metadata("Metadata of the DataVolume; its name is what volumes refer to.")),
            "spec": DATA_VOLUME_SPEC,
            "status": nullable(obj(description="Unused; kept for compatibility with older clients.")),
        },
        "A DataVolume the VM controller creates and owns.",
        required=["spec"],
    )
)


def _matcher(kind: str, namespaced_kind: str, cluster_kind: str, description: str) -> Schema:
    return obj(
        {
            "inferFromVolume": string(f"Volume whose labels name the {kind} to use."),
            "inferFromVolumeFailurePolicy": string("Reject (default) or Ignore when inference fails."),
            "kind": string(f"{namespaced_kind} or {cluster_kind} (the default)."),
            "name": string(f"Name of the {kind}."),
            "revisionName": string(f"ControllerRevision holding the {kind} as first applied."),
        },
        description,
    )


def _status_ref(kind: str) -> Schema:
    return nullable(
        obj(
            {
                "controllerRevisionRef": obj(
                    {"name": string("Name of the ControllerRevision.")},
                    f"ControllerRevision holding the {kind} in use.",
                ),
                "inferFromVolume": string(f"Volume the {kind} was inferred from."),
                "inferFromVolumeFailurePolicy": string("Reject or Ignore when inference fails."),
                "kind": string(f"Kind of the {kind}."),
                "name": string(f"Name of the {kind}."),
            },
            f"The {kind} in use.",
        )
    )


_RUN_STRATEGY_MEANINGS = {
    RUN_STRATEGY_ALWAYS: "kept running, restarted whenever it stops",
    RUN_STRATEGY_HALTED: "kept stopped",
    RUN_STRATEGY_MANUAL: "started and stopped only on request",
    RUN_STRATEGY_RERUN_ON_FAILURE: "restarted after a failure, not after a clean shutdown",
    RUN_STRATEGY_ONCE: "run once, never restarted",
    RUN_STRATEGY_WAIT_AS_RECEIVER: "waits to receive a migration from another cluster",
}

VM_SPEC: Schema = obj(
    {
        "dataVolumeTemplates": array(DATA_VOLUME_TEMPLATE, "DataVolumes created with the VM and deleted with it."),
        "instancetype": _matcher(
            "instancetype", INSTANCETYPE_KIND, CLUSTER_INSTANCETYPE_KIND, "Instance type providing CPU and memory."
        ),
        "preference": _matcher(
            "preference", PREFERENCE_KIND, CLUSTER_PREFERENCE_KIND, "Preference providing default settings."
        ),
        # No enum, as in KubeVirt: admission rejects other values itself with "Invalid RunStrategy (%s)".
        "runStrategy": string(
            "When the VMI runs: "
            + ", ".join(f"{name} ({meaning})" for name, meaning in _RUN_STRATEGY_MEANINGS.items())
            + ". Mutually exclusive with running."
        ),
        "running": boolean("Deprecated, use runStrategy: true is Always, false is Halted."),
        "template": obj(
            {
                "metadata": nullable(embedded_metadata("Labels and annotations of the VMI created.")),
                "spec": VMI_SPEC,
            },
            "The VirtualMachineInstance created when the VM starts.",
        ),
        "updateVolumesStrategy": string("How volume changes reach a running VMI: Replacement or Migration."),
    },
    "The VMI template and when it should run.",
    required=["template"],
)

_STATE_CHANGE_REQUEST = obj(
    {
        "action": string("Start or Stop."),
        "data": string_map("Extra arguments, e.g. paused: 'true'."),
        "uid": string("UID of the VMI the request is for (Stop)."),
    },
    required=["action"],
)

_DRY_RUN = array(string(), "All, or empty to persist the change.", list_type="atomic")

_VOLUME_REQUEST = obj(
    {
        "addVolumeOptions": obj(
            {
                "disk": describe(DISK, "The disk the hotplugged volume is exposed as."),
                "dryRun": _DRY_RUN,
                "name": string("Name of the volume."),
                "volumeSource": HOTPLUG_VOLUME_SOURCE,
            },
            "Hotplug a volume.",
            required=["disk", "name", "volumeSource"],
        ),
        "removeVolumeOptions": obj(
            {"dryRun": _DRY_RUN, "name": string("Name of the volume.")},
            "Unplug a volume.",
            required=["name"],
        ),
    }
)

VM_STATUS: Schema = obj(
    {
        "changedBlockTracking": CHANGED_BLOCK_TRACKING_STATUS,
        "conditions": conditions("Conditions of the VM: Ready, Failure, RestartRequired and those of the VMI."),
        "created": boolean("Whether the VMI exists."),
        "desiredGeneration": int64("metadata.generation of the VM."),
        "instancetypeRef": _status_ref("instancetype"),
        "memoryDumpRequest": nullable(
            obj(
                {
                    "claimName": string("Claim receiving the dump."),
                    "endTimestamp": timestamp("When the dump finished."),
                    "fileName": string("Dump file name in the claim."),
                    "message": string("Human-readable detail."),
                    "phase": string("Associating, InProgress, Completed, Unmounting, Dissociating or Failed."),
                    "remove": boolean("Whether the dump volume is being removed."),
                    "startTimestamp": timestamp("When the dump started."),
                },
                "State of the memory dump request.",
                required=["claimName", "phase"],
            )
        ),
        "observedGeneration": int64("VM generation the current VMI was created from."),
        "preferenceRef": _status_ref("preference"),
        "printableStatus": string(
            f"Short human-readable state of the VM: {', '.join(PRINTABLE_STATUSES)}.", default="Stopped"
        ),
        "ready": boolean("Whether the VMI is Ready."),
        "restoreInProgress": string("Name of the VirtualMachineRestore in progress."),
        # No enum, as in KubeVirt: admission rejects other values itself with "Invalid RunStrategy (%s)".
        "runStrategy": string("Run strategy last acted upon."),
        "snapshotInProgress": string("Name of the VirtualMachineSnapshot in progress."),
        "startFailure": nullable(
            obj(
                {
                    "consecutiveFailCount": plain_integer("Starts in a row that failed."),
                    "lastFailedVMIUID": string("UID of the last VMI that failed."),
                    "retryAfterTimestamp": timestamp("No new start before this time (crash-loop backoff)."),
                },
                "Consecutive start failures, for the crash-loop backoff.",
            )
        ),
        "stateChangeRequests": array(_STATE_CHANGE_REQUEST, "Pending start and stop requests, oldest first."),
        "volumeRequests": array(_VOLUME_REQUEST, "Pending volume hotplug and unplug requests.", list_type="atomic"),
        "volumeSnapshotStatuses": array(
            obj(
                {
                    "enabled": boolean("Whether the volume can be snapshotted."),
                    "name": string("Name of the volume."),
                    "reason": string("Why it cannot."),
                },
                required=["enabled", "name"],
            ),
            "Whether each volume supports snapshots.",
        ),
        "volumeUpdateState": obj(
            {
                "volumeMigrationState": obj(
                    {"migratedVolumes": MIGRATED_VOLUMES},
                    "State of a storage migration.",
                )
            },
            "State of volume updates made with updateVolumesStrategy.",
        ),
    },
    "Observed state of the VM, written by the VM controller.",
)

VIRTUAL_MACHINE: Schema = obj(
    {
        "apiVersion": string(f"API version: {KUBEVIRT_API_VERSION}."),
        "kind": string(f"Kind: {VM_KIND}."),
        "metadata": obj(),
        "spec": VM_SPEC,
        "status": VM_STATUS,
    },
    "A virtual machine: a VMI template that is started and stopped according to its run strategy.",
    required=["spec"],
)
