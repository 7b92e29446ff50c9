"""snapshot.kubevirt.io/v1beta1: VirtualMachineSnapshot, VirtualMachineSnapshotContent and VirtualMachineRestore,
with the fields and descriptions of KubeVirt's CRDs (staging/src/kubevirt.io/api/snapshot/v1beta1/types.go)."""

from __future__ import annotations

from typing import Final

from pykubevirt.api.cdi import PVC_SPEC
from pykubevirt.api.constants import SNAPSHOT_API_VERSION, VM_RESTORE_KIND, VM_SNAPSHOT_CONTENT_KIND, VM_SNAPSHOT_KIND
from pykubevirt.api.kubevirt import atomic, conditions, nullable
from pykubevirt.api.kubevirt.vm import VM_SPEC, VM_STATUS
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    describe,
    free_form,
    obj,
    string,
    string_map,
    timestamp,
)

DELETION_POLICIES: Final = ("Delete", "Retain")
SNAPSHOT_PHASES: Final = ("InProgress", "Succeeded", "Failed", "Deleting", "Unknown")
INDICATIONS: Final = ("Online", "NoGuestAgent", "GuestAgent", "QuiesceTimeout", "Paused", "PartialSnapshot")
TARGET_READINESS_POLICIES: Final = ("StopTarget", "WaitGracePeriod", "FailImmediate", "WaitEventually")
DEFAULT_TARGET_READINESS_POLICY: Final = "WaitGracePeriod"
VOLUME_RESTORE_POLICIES: Final = ("RandomizeNames", "InPlace", "PrefixTargetName")
VOLUME_OWNERSHIP_POLICIES: Final = ("Vm", "None")
# snapshotv1.DefaultFailureDeadline: the controller's value for an unset spec.failureDeadline (no CRD default).
DEFAULT_FAILURE_DEADLINE: Final = "5m"


def typed_local_object_reference(description: str) -> Schema:
    """corev1.TypedLocalObjectReference, atomic as kube publishes it."""
    return atomic(
        obj(
            {
                "apiGroup": string(
                    "APIGroup is the group for the resource being referenced. If APIGroup is not specified, the "
                    "specified Kind must be in the core API group. For any other third-party types, APIGroup is "
                    "required."
                ),
                "kind": string("Kind is the type of resource being referenced"),
                "name": string("Name is the name of resource being referenced"),
            },
            description,
            required=["kind", "name"],
        )
    )


def _snapshot_conditions() -> Schema:
    """snapshotv1.Condition list: Ready, Progressing or Failure, with nullable times."""
    node = conditions("Ready, Progressing and Failure.")
    node["items"]["description"] = "Condition defines conditions"
    node["items"]["properties"]["type"]["description"] = "ConditionType is the const type for Conditions"
    node["x-kubernetes-list-type"] = "atomic"
    return node


def _set(items: Schema, description: str = "") -> Schema:
    return array(items, description, list_type="set")


_ERROR = obj(
    {"message": string("What went wrong."), "time": timestamp("When it went wrong.")},
    "Error is the last error encountered during the snapshot/restore",
)

_CREATION_TIME = nullable(timestamp("When the snapshot was taken."))
_READY_TO_USE = boolean("Whether the snapshot can be restored from.")

# --- VirtualMachineSnapshot ------------------------------------------------------------------------------------------

VM_SNAPSHOT_SPEC: Schema = obj(
    {
        "source": typed_local_object_reference(
            "TypedLocalObjectReference contains enough information to let you locate the typed referenced object "
            "inside the same namespace."
        ),
        "deletionPolicy": string(
            "DeletionPolicy defines that to do with VirtualMachineSnapshot when VirtualMachineSnapshot is deleted: "
            + " or ".join(DELETION_POLICIES)
            + " its VirtualMachineSnapshotContent (Delete when unset)."
        ),
        "failureDeadline": string(
            "This time represents the number of seconds we permit the vm snapshot to take. In case we pass this "
            "deadline we mark this snapshot as failed. Defaults to DefaultFailureDeadline - 5min"
        ),
    },
    "VirtualMachineSnapshotSpec is the spec for a VirtualMachineSnapshot resource",
    required=["source"],
)

VM_SNAPSHOT_STATUS: Schema = obj(
    {
        "conditions": _snapshot_conditions(),
        "creationTime": _CREATION_TIME,
        "error": _ERROR,
        "indications": _set(
            string("Indication is a way to indicate the state of the vm when taking the snapshot"),
            "Deprecated: Use SourceIndications instead. This field will be removed in a future version.",
        ),
        "phase": string(
            "VirtualMachineSnapshotPhase is the current phase of the VirtualMachineSnapshot: "
            + ", ".join(SNAPSHOT_PHASES)
            + "."
        ),
        "readyToUse": _READY_TO_USE,
        "snapshotVolumes": obj(
            {
                "excludedVolumes": _set(string(), "Volumes of the VM not in the snapshot."),
                "includedVolumes": _set(string(), "Volumes of the VM in the snapshot."),
            },
            "SnapshotVolumesLists includes the list of volumes which were included in the snapshot and volumes which "
            "were excluded from the snapshot",
        ),
        "sourceIndications": array(
            obj(
                {
                    "indication": string("Indication is the indication type: " + ", ".join(INDICATIONS) + "."),
                    "message": string("Message provides a description message of the indication"),
                },
                "SourceIndication provides an indication of the source VM with its description message",
                required=["indication", "message"],
            ),
            "The state of the source VM when the snapshot was taken.",
            list_type="atomic",
        ),
        "sourceUID": string("UID of the source VirtualMachine."),
        "virtualMachineSnapshotContentName": string("Name of the VirtualMachineSnapshotContent holding the data."),
    },
    "VirtualMachineSnapshotStatus is the status for a VirtualMachineSnapshot resource",
)


def _top(kind: str, description: str, spec: Schema, status: Schema) -> Schema:
    return obj(
        {
            "apiVersion": string(f"API version: {SNAPSHOT_API_VERSION}."),
            "kind": string(f"Kind: {kind}."),
            "metadata": obj(),
            "spec": spec,
            "status": status,
        },
        description,
        required=["spec"],
    )


VIRTUAL_MACHINE_SNAPSHOT: Schema = _top(
    VM_SNAPSHOT_KIND,
    "VirtualMachineSnapshot defines the operation of snapshotting a VM",
    VM_SNAPSHOT_SPEC,
    VM_SNAPSHOT_STATUS,
)

# --- VirtualMachineSnapshotContent -----------------------------------------------------------------------------------

_SNAPSHOT_VM = obj(
    {
        "metadata": nullable(free_form("Metadata of the VirtualMachine when it was snapshotted.")),
        "spec": describe(VM_SPEC, "VirtualMachineSpec contains the VirtualMachine specification."),
        "status": describe(
            VM_STATUS,
            "Status holds the current state of the controller and brief information about its associated "
            "VirtualMachineInstance",
        ),
    },
    "The VirtualMachine as it was when snapshotted.",
)

_VOLUME_BACKUP = obj(
    {
        "persistentVolumeClaim": obj(
            {
                "metadata": free_form("Standard object's metadata."),
                "spec": describe(
                    PVC_SPEC, "Spec defines the desired characteristics of a volume requested by a pod author."
                ),
            },
            "The claim the volume was snapshotted from, to make it again on restore.",
        ),
        "volumeName": string("Name of the VM's volume."),
        "volumeSnapshotName": string("Name of the VolumeSnapshot of the claim."),
    },
    "VolumeBackup contains the data neeed to restore a PVC",
    required=["persistentVolumeClaim", "volumeName"],
)

VM_SNAPSHOT_CONTENT_SPEC: Schema = obj(
    {
        "source": obj(
            {"virtualMachine": _SNAPSHOT_VM},
            "SourceSpec contains the appropriate spec for the resource being snapshotted",
        ),
        "virtualMachineSnapshotName": string("Name of the VirtualMachineSnapshot this content belongs to."),
        "volumeBackups": array(_VOLUME_BACKUP, "The claims of the snapshot, one a volume.", list_type="atomic"),
    },
    "VirtualMachineSnapshotContentSpec is the spec for a VirtualMachineSnapshotContent resource",
    required=["source"],
)

VM_SNAPSHOT_CONTENT_STATUS: Schema = obj(
    {
        "creationTime": _CREATION_TIME,
        "error": _ERROR,
        "readyToUse": _READY_TO_USE,
        "volumeSnapshotStatus": array(
            obj(
                {
                    "creationTime": nullable(timestamp("When the VolumeSnapshot was taken.")),
                    "error": _ERROR,
                    "readyToUse": boolean("Whether the VolumeSnapshot is ready."),
                    "volumeSnapshotName": string("Name of the VolumeSnapshot."),
                },
                "VolumeSnapshotStatus is the status of a VolumeSnapshot",
                required=["volumeSnapshotName"],
            ),
            "The state of each VolumeSnapshot.",
            list_type="atomic",
        ),
    },
    "VirtualMachineSnapshotContentStatus is the status for a VirtualMachineSnapshotStatus resource",
)

VIRTUAL_MACHINE_SNAPSHOT_CONTENT: Schema = _top(
    VM_SNAPSHOT_CONTENT_KIND,
    "VirtualMachineSnapshotContent contains the snapshot data",
    VM_SNAPSHOT_CONTENT_SPEC,
    VM_SNAPSHOT_CONTENT_STATUS,
)

# --- VirtualMachineRestore -------------------------------------------------------------------------------------------

VM_RESTORE_SPEC: Schema = obj(
    {
        "patches": array(
            string(),
            "If the target for the restore does not exist, it will be created. Patches holds JSON patches that "
            "would be applied to the target manifest before it's created. Patches should fit the target's Kind. "
            'Example for a patch: {"op": "replace", "path": "/metadata/name", "value": "new-vm-name"}',
            list_type="atomic",
        ),
        "target": typed_local_object_reference("initially only VirtualMachine type supported"),
        "targetReadinessPolicy": string(
            "TargetReadinessPolicy defines how to handle the restore in case the target is not ready",
            enum=TARGET_READINESS_POLICIES,
            default=DEFAULT_TARGET_READINESS_POLICY,
        ),
        "virtualMachineSnapshotName": string("Name of the VirtualMachineSnapshot to restore."),
        # No enum, as in KubeVirt: the admitter refuses other values itself.
        "volumeOwnershipPolicy": string(
            "VolumeOwnershipPolicy defines what owns volumes once they're restored: "
            + " or ".join(VOLUME_OWNERSHIP_POLICIES)
            + "."
        ),
        "volumeRestoreOverrides": array(
            obj(
                {
                    "annotations": string_map("Annotations to add to the restored claim."),
                    "labels": string_map("Labels to add to the restored claim."),
                    "restoreName": string("Name of the restored claim."),
                    "volumeName": string("Name of the volume to override."),
                },
                "VolumeRestoreOverride specifies how a volume should be restored from a VirtualMachineSnapshot",
            ),
            "VolumeRestoreOverrides gives the option to change properties of each restored volume For example, "
            "specifying the name of the restored volume, or adding labels/annotations to it",
            list_type="atomic",
        ),
        "volumeRestorePolicy": string(
            "VolumeRestorePolicy defines how to handle the restore of snapshotted volumes: "
            + ", ".join(VOLUME_RESTORE_POLICIES)
            + " (RandomizeNames by default)."
        ),
    },
    "VirtualMachineRestoreSpec is the spec for a VirtualMachineRestore resource",
    required=["target", "virtualMachineSnapshotName"],
)

VM_RESTORE_STATUS: Schema = obj(
    {
        "complete": boolean("Whether the restore has finished."),
        "conditions": _snapshot_conditions(),
        "deletedDataVolumes": _set(string(), "DataVolumes of the target the restore deleted."),
        "restoreTime": timestamp("When the restore finished."),
        "restores": array(
            obj(
                {
                    "dataVolumeName": string("Name of the DataVolume the claim belongs to, if any."),
                    "persistentVolumeClaim": string("Name of the restored claim."),
                    "volumeName": string("Name of the VM's volume."),
                    "volumeSnapshotName": string("Name of the VolumeSnapshot the claim is restored from."),
                },
                "VolumeRestore contains the data needed to restore a PVC",
                required=["persistentVolumeClaim", "volumeName", "volumeSnapshotName"],
            ),
            "The claims restored, one a volume.",
            list_type="atomic",
        ),
    },
    "VirtualMachineRestoreStatus is the status for a VirtualMachineRestore resource",
)

VIRTUAL_MACHINE_RESTORE: Schema = _top(
    VM_RESTORE_KIND,
    "VirtualMachineRestore defines the operation of restoring a VM",
    VM_RESTORE_SPEC,
    VM_RESTORE_STATUS,
)
