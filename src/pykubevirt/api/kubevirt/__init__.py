"""Schemas of kubevirt.io/v1 (VM, VMI, VMIM), one module a concept, and the node modifiers they share.

Submodules are imported directly (`pykubevirt.api.kubevirt.vm`); this package imports none of them.
"""

from __future__ import annotations

import copy

from pykubevirt.api.schema import Schema, array, condition, integer, obj, string, timestamp

UINT32_MAX = 2**32 - 1


def plain_integer(description: str = "") -> Schema:
    """An integer without a format: how KubeVirt's CRDs publish Go `int` and `uint` fields."""
    node: Schema = {"type": "integer"}
    if description:
        node["description"] = description
    return node


def uint32(description: str = "") -> Schema:
    """A Go `uint32`, published as a bounded int64."""
    return integer(description, format="int64", minimum=0, maximum=UINT32_MAX)


def nullable(schema: Schema) -> Schema:
    """A copy of `schema` that accepts `null` (pointer fields KubeVirt marks nullable)."""
    node = copy.deepcopy(schema)
    node["nullable"] = True
    return node


def atomic(schema: Schema) -> Schema:
    """A copy of an object node that server-side apply replaces as a whole."""
    node = copy.deepcopy(schema)
    node["x-kubernetes-map-type"] = "atomic"
    return node


def conditions(description: str) -> Schema:
    """The `status.conditions` list of VM, VMI and VMIM (probe and transition times may be null)."""
    item = condition()
    fields = item["properties"]
    for name, text in (
        ("type", "Condition type, e.g. Ready."),
        ("status", "True, False or Unknown."),
        ("lastProbeTime", "When the condition was last probed."),
        ("lastTransitionTime", "When the status last changed."),
        ("reason", "Machine-readable reason of the last transition."),
        ("message", "Human-readable detail of the last transition."),
    ):
        fields[name]["description"] = text
    for name in ("lastProbeTime", "lastTransitionTime"):
        fields[name] = nullable(fields[name])
    return array(item, description)


def phase_transition_timestamps(description: str) -> Schema:
    """When each phase was entered, oldest first."""
    return array(
        obj({"phase": string("The phase entered."), "phaseTransitionTimestamp": timestamp("When it was entered.")}),
        description,
        list_type="atomic",
    )


def replicas_status(members: str, failure: str, what: str) -> Schema:
    """The status of a kind that keeps a number of `members` (a VMI replica set, a VM pool), as its controller writes
    it: counts, the selector string for the scale subresource, ReplicaFailure and ReplicaPaused."""
    return obj(
        {
            "conditions": conditions(f"ReplicaFailure while {failure} fails, ReplicaPaused while paused."),
            "labelSelector": string("The selector in its string form, for the scale subresource."),
            "readyReplicas": integer(f"{members} of the {what} whose Ready condition is True."),
            "replicas": integer(f"{members} of the {what} that count toward its replicas."),
        },
        f"Observed state of the {what}, written by its controller.",
    )
