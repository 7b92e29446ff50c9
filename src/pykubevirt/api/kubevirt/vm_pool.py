"""VirtualMachinePool (pool.kubevirt.io/v1beta1): numbered VMs from one VM template, as KubeVirt's CRD publishes it."""

from __future__ import annotations

from pykubevirt.api.constants import POOL_API_VERSION, VM_POOL_KIND
from pykubevirt.api.kubevirt import nullable, replicas_status
from pykubevirt.api.kubevirt.pod_shapes import LABEL_SELECTOR
from pykubevirt.api.kubevirt.vm import VM_SPEC
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    describe,
    embedded_metadata,
    int_or_string,
    integer,
    obj,
    string,
)

SORT_POLICIES = ("AscendingOrder", "DescendingOrder", "Newest", "Oldest", "Random")
STATE_PRESERVATIONS = ("Disabled", "Offline", "Online")

_SELECTION_POLICY = obj(
    {
        "selectors": obj(
            {
                "labelSelector": describe(LABEL_SELECTOR, "VMs whose template labels match are chosen."),
                "nodeSelectorRequirementMatcher": array(
                    obj(
                        {
                            "key": string("The node label key."),
                            "operator": string("In, NotIn, Exists, DoesNotExist, Gt or Lt."),
                            "values": array(string(), "Values the operator compares with.", list_type="atomic"),
                        },
                        required=["key", "operator"],
                    ),
                    "VMs whose template nodeSelector matches are chosen.",
                    list_type="atomic",
                ),
            },
            "Narrow the VMs chosen to those these select.",
        ),
        "sortPolicy": string("Which VMs go first: " + ", ".join(SORT_POLICIES) + ".", enum=SORT_POLICIES),
    },
    "Which VMs are chosen first.",
)

_STATE_PRESERVATION = string(
    "Disabled (default), Offline or Online: whether a removed VM's claims are kept for reuse.", enum=STATE_PRESERVATIONS
)

VM_POOL_SPEC: Schema = obj(
    {
        "autohealing": obj(
            {
                "minFailingToStartDuration": string("How long a VM must be failing before it is replaced (5m)."),
                "startUpFailureThreshold": integer("Start failures in a row before a VM is replaced (3).", minimum=1),
            },
            "When a failing VM is replaced by a new one.",
        ),
        "maxUnavailable": int_or_string("VMs (or a percentage) that may be unready at once during an update; 100%."),
        "nameGeneration": obj(
            {
                "appendIndexToConfigMapRefs": boolean("Append the VM's index to the ConfigMaps it names."),
                "appendIndexToSecretRefs": boolean("Append the VM's index to the Secrets it names."),
            },
            "How the names a VM refers to are made from its index.",
        ),
        "paused": boolean("Whether the controller stops creating, deleting and updating VMs."),
        "replicas": integer("How many VMs the pool has; 1 when unset.", minimum=0),
        "scaleInStrategy": obj(
            {
                "opportunistic": obj(
                    {"statePreservation": _STATE_PRESERVATION}, "Only let go of VMs deleted by other means."
                ),
                "proactive": obj(
                    {"selectionPolicy": _SELECTION_POLICY, "statePreservation": _STATE_PRESERVATION},
                    "Scale in by deleting VMs (the default).",
                ),
                "unmanaged": obj(description="The controller never removes a VM it made."),
            },
            "How the pool removes VMs when scaled in.",
        ),
        "selector": describe(LABEL_SELECTOR, "The VMs of the pool, by labels."),
        "updateStrategy": obj(
            {
                "opportunistic": obj(description="Update VMs; their VMIs follow when they restart."),
                "proactive": obj(
                    {"selectionPolicy": _SELECTION_POLICY},
                    "Update VMs and restart their VMIs (the default).",
                ),
                "unmanaged": obj(description="The controller never updates a VM it made."),
            },
            "How VMs follow a changed template.",
        ),
        "virtualMachineTemplate": obj(
            {
                "metadata": nullable(embedded_metadata("Labels and annotations of the VMs made.")),
                "spec": VM_SPEC,
            },
            "The VirtualMachine each member is made from.",
        ),
    },
    "How many VMs, which ones, and what they are made from.",
    required=["selector", "virtualMachineTemplate"],
)

VM_POOL_STATUS: Schema = replicas_status("VMs", "scaling or updating", "pool")

VIRTUAL_MACHINE_POOL: Schema = obj(
    {
        "apiVersion": string(f"API version: {POOL_API_VERSION}."),
        "kind": string(f"Kind: {VM_POOL_KIND}."),
        "metadata": obj(),
        "spec": VM_POOL_SPEC,
        "status": VM_POOL_STATUS,
    },
    "A pool of numbered VirtualMachines made from one template, scaled and updated together.",
    required=["spec"],
)
