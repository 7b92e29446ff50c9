"""`evacuate/cancel` of a VM or VMI: the VMI's `status.evacuationNodeName` removed, so it is migrated off no more.

As KubeVirt's EvacuateCancelHandler (pkg/virt-api/rest/evacuate_cancel.go): refused while the node carries the
drain taint (the evacuation controller would mark the VMI again), nothing to do when the VMI is not marked, else a
JSON patch that tests the node the caller names and removes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api import errors

EVACUATION_PATH = "/status/evacuationNodeName"


def drain_taint_refusal(node: Mapping[str, Any], taint_key: str) -> errors.APIError | None:
    """400 when the node carries `<taint_key>:NoSchedule` (the legacy way to have every VMI evacuated)."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("key") == taint_key and taint.get("effect") == "NoSchedule":
            # KubeVirt quotes the Go String() of the taint it matched against.
            shown = f"&Taint{{Key:{taint_key},Value:,Effect:NoSchedule,TimeAdded:<nil>,}}"
            name = (node.get("metadata") or {}).get("name", "")
            return errors.bad_request(f'Node "{name}" has NodeDrainTaintKey "{shown}"')
    return None


def evacuation_node(vmi: Mapping[str, Any]) -> str:
    """The node whose taint decides: the one the VMI is evacuated from, else (an older VMI) the one it runs on."""
    status = vmi.get("status") or {}
    return str(status.get("evacuationNodeName") or status.get("nodeName") or "")


def cancel_patch(node_name: str) -> list[dict[str, Any]]:
    """Remove the mark only if it still names the node the caller saw (a newer evacuation stays)."""
    return [{"op": "test", "path": EVACUATION_PATH, "value": node_name}, {"op": "remove", "path": EVACUATION_PATH}]
