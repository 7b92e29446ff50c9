"""VirtualMachineInstanceReplicaSet: a number of identical VMIs from one template, as KubeVirt's CRD publishes it."""

from __future__ import annotations

from pykubevirt.api.constants import KUBEVIRT_API_VERSION, VMIRS_KIND
from pykubevirt.api.kubevirt import nullable, replicas_status
from pykubevirt.api.kubevirt.pod_shapes import LABEL_SELECTOR
from pykubevirt.api.kubevirt.vmi import VMI_SPEC
from pykubevirt.api.schema import Schema, boolean, describe, embedded_metadata, integer, obj, string

# The condition types the replica set controller writes.
REPLICA_FAILURE = "ReplicaFailure"
REPLICA_PAUSED = "ReplicaPaused"

VMIRS_SPEC: Schema = obj(
    {
        "paused": boolean("Whether the controller stops creating and deleting VMIs."),
        "replicas": integer("How many VMIs should run; 1 when unset."),
        "selector": describe(LABEL_SELECTOR, "The VMIs this replica set counts and adopts, by labels."),
        "template": obj(
            {
                "metadata": nullable(embedded_metadata("Labels and annotations of the VMIs created.")),
                "spec": VMI_SPEC,
            },
            "The VirtualMachineInstance each replica is created from.",
        ),
    },
    "How many VMIs, which ones, and what they are made from.",
    required=["selector", "template"],
)

VMIRS_STATUS: Schema = replicas_status("VMIs", "creating or deleting", "replica set")

VIRTUAL_MACHINE_INSTANCE_REPLICA_SET: Schema = obj(
    {
        "apiVersion": string(f"API version: {KUBEVIRT_API_VERSION}."),
        "kind": string(f"Kind: {VMIRS_KIND}."),
        "metadata": obj(),
        "spec": VMIRS_SPEC,
        "status": VMIRS_STATUS,
    },
    "A number of VMIs from one template, kept running: failed or deleted ones are replaced.",
    required=["spec"],
)
