"""clone.kubevirt.io/v1beta1: VirtualMachineClone, with the fields and descriptions of KubeVirt's CRD
(staging/src/kubevirt.io/api/clone/v1beta1/types.go)."""

from __future__ import annotations

from typing import Final

from pykubevirt.api.constants import CLONE_API_VERSION, VM_CLONE_KIND
from pykubevirt.api.kubevirt import atomic, conditions, nullable
from pykubevirt.api.schema import Schema, array, obj, string, string_map, timestamp

# KubeVirt's CRD serves v1alpha1 too (crds.go: NewVirtualMachineCloneCrd), not deprecated, with the same schema.
CLONE_OLDER_VERSION: Final = "v1alpha1"
CLONE_PLURAL: Final = "virtualmachineclones"
CLONE_PHASES: Final = ("SnapshotInProgress", "CreatingTargetVM", "RestoreInProgress", "Succeeded", "Failed", "Unknown")
CONDITION_TYPES: Final = ("Ready", "Progressing")
VOLUME_NAME_POLICIES: Final = ("RandomizeNames", "PrefixTargetName")

_FILTERS_DOC = (
    'Example use: "!some/key*".\n'
    "For a detailed description, please refer to "
    "https://kubevirt.io/user-guide/operations/clone_api/#label-annotation-filters."
)


def _reference(description: str) -> Schema:
    """corev1.TypedLocalObjectReference, atomic as kube publishes it."""
    return atomic(
        obj(
            {
                "apiGroup": string(
                    "APIGroup is the group for the resource being referenced.\n"
                    "If APIGroup is not specified, the specified Kind must be in the core API group.\n"
                    "For any other third-party types, APIGroup is required."
                ),
                "kind": string("Kind is the type of resource being referenced"),
                "name": string("Name is the name of resource being referenced"),
            },
            description,
            required=["kind", "name"],
        )
    )


def _filters() -> Schema:
    return array(string(), _FILTERS_DOC, list_type="atomic")


VM_CLONE_SPEC: Schema = obj(
    {
        "annotationFilters": _filters(),
        "labelFilters": _filters(),
        "newMacAddresses": string_map(
            "NewMacAddresses manually sets that target interfaces' mac addresses. The key is the interface name and "
            "the\nvalue is the new mac address. If this field is not specified, a new MAC address will\nbe generated "
            "automatically, as for any interface that is not included in this map."
        ),
        "newSMBiosSerial": string(
            "NewSMBiosSerial manually sets that target's SMbios serial. If this field is not specified, a new serial "
            "will\nbe generated automatically."
        ),
        "patches": array(
            string(),
            "Patches holds JSON patches to apply to target. Patches should fit the target's Kind.\n"
            'Example: \'{"op": "add", "path": "/spec/template/metadata/labels/example", "value": "new-label"}\'',
            list_type="atomic",
        ),
        "source": _reference(
            "Source is the object that would be cloned. Currently supported source types are:\n"
            "VirtualMachine of kubevirt.io API group,\n"
            "VirtualMachineSnapshot of snapshot.kubevirt.io API group"
        ),
        "target": _reference(
            "Target is the outcome of the cloning process.\n"
            "Currently supported source types are:\n"
            "- VirtualMachine of kubevirt.io API group\n"
            "- Empty (nil).\n"
            "If the target is not provided, the target type would default to VirtualMachine and a random\n"
            "name would be generated for the target. The target's name can be viewed by\n"
            'inspecting status "TargetName" field below.'
        ),
        "template": obj(
            {"annotationFilters": _filters(), "labelFilters": _filters()},
            "For a detailed description, please refer to "
            "https://kubevirt.io/user-guide/operations/clone_api/#label-annotation-filters.",
        ),
        "volumeNamePolicy": string(
            "VolumeNamePolicy defines how to handle volume naming during the clone operation",
            enum=VOLUME_NAME_POLICIES,
        ),
    },
    "How the clone is made: its source, its target and what changes between them.",
    required=["source"],
)


def _conditions() -> Schema:
    """clonev1beta1.Condition list: Ready or Progressing, with nullable times."""
    node = conditions(" or ".join(CONDITION_TYPES) + ".")
    node["items"]["description"] = "Condition defines conditions"
    node["items"]["properties"]["type"]["description"] = "ConditionType is the const type for Conditions"
    node["x-kubernetes-list-type"] = "atomic"
    return node


VM_CLONE_STATUS: Schema = obj(
    {
        "conditions": _conditions(),
        "creationTime": nullable(timestamp("When the clone was created.")),
        "phase": string("Where the clone stands: " + ", ".join(CLONE_PHASES) + "."),
        "restoreName": nullable(string("Name of the VirtualMachineRestore the clone made.")),
        "snapshotName": nullable(string("Name of the VirtualMachineSnapshot the clone took or used.")),
        "targetName": nullable(string("Name of the target VirtualMachine.")),
    },
    "Observed state of the clone, written by its controller.",
)

VIRTUAL_MACHINE_CLONE: Schema = obj(
    {
        "apiVersion": string(f"API version: {CLONE_API_VERSION}."),
        "kind": string(f"Kind: {VM_CLONE_KIND}."),
        "metadata": obj(),
        "spec": VM_CLONE_SPEC,
        "status": VM_CLONE_STATUS,
    },
    "VirtualMachineClone is a CRD that clones one VM into another.",
    required=["spec"],
)
