"""What KubeVirt's `virt-launcher-eviction-interceptor.kubevirt.io` webhook decides for an eviction of a pod, as
upstream's PodEvictionAdmitter: pure, so the in-process admission and virt-api's webhook (cluster mode) share it.

A launcher pod whose VMI must move (evictionStrategy LiveMigrate, or LiveMigrateIfPossible and migratable, or
External) is not evicted: its VMI is marked with `status.evacuationNodeName` and the eviction refused with 429.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pykubevirt.api.constants import APP_LABEL, DOMAIN_ANNOTATION
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.eviction_strategy import (
    EXTERNAL,
    LIVE_MIGRATE,
    LIVE_MIGRATE_IF_POSSIBLE,
    eviction_strategy,
    is_migratable,
)

WEBHOOK_NAME = "virt-launcher-eviction-interceptor.kubevirt.io"
DENIED_CODE = 429
LAUNCHER_APP = "virt-launcher"
_MUST_MOVE = frozenset({LIVE_MIGRATE, LIVE_MIGRATE_IF_POSSIBLE, EXTERNAL})
_COMPLETED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """`denial` (the message without the webhook's prefix) or None to allow; `evacuate_to`: mark the VMI first."""

    denial: str | None = None
    evacuate_to: str | None = None


ALLOWED = Verdict()


def launcher_vmi(pod: dict[str, Any]) -> str | None:
    """The VMI a running launcher pod serves, or None for any other pod (whose eviction is none of KubeVirt's)."""
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get(APP_LABEL) != LAUNCHER_APP:
        return None
    if (pod.get("status") or {}).get("phase") in _COMPLETED:
        return None
    name = (meta.get("annotations") or {}).get(DOMAIN_ANNOTATION)
    return str(name) if name else None


def decide(pod: dict[str, Any], vmi: dict[str, Any] | None, config: ClusterConfig) -> Verdict:
    """The verdict for evicting `pod`, whose VMI (named by `launcher_vmi`) is `vmi` (None: not found)."""
    vmi_name = launcher_vmi(pod)
    if vmi_name is None:
        return ALLOWED
    namespace = str((pod.get("metadata") or {}).get("namespace"))
    if vmi is None:
        message = f'virtualmachineinstances.kubevirt.io "{vmi_name}" not found'
        return Verdict(f"kubevirt failed getting the vmi: {message}")
    strategy = eviction_strategy(vmi, config)
    migratable = is_migratable(vmi)
    if strategy == LIVE_MIGRATE and not migratable:
        return Verdict(f"VMI {vmi_name} is configured with an eviction strategy but is not live-migratable")
    if strategy not in _MUST_MOVE or (strategy == LIVE_MIGRATE_IF_POSSIBLE and not migratable):
        return ALLOWED
    status = vmi.get("status") or {}
    if status.get("evacuationNodeName"):
        return Verdict(f'Evacuation in progress: Eviction triggered evacuation of VMI "{namespace}/{vmi_name}"')
    node = (pod.get("spec") or {}).get("nodeName")
    if status.get("nodeName") != node:
        return Verdict("Eviction request for target Pod")
    return Verdict(f'Eviction triggered evacuation of VMI "{namespace}/{vmi_name}"', evacuate_to=str(node))


def evacuation_patch(vmi: dict[str, Any], node: str, eviction: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The JSON patch marking the VMI for evacuation (and the descheduler as its source when it asked)."""
    patch: list[dict[str, Any]] = [{"op": "add", "path": "/status/evacuationNodeName", "value": node}]
    requested = ((eviction or {}).get("metadata") or {}).get("annotations") or {}
    if requested.get("requested-by") == "sigs.k8s.io/descheduler":
        if vmi["metadata"].get("annotations") is None:
            patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        patch.append(
            {"op": "add", "path": "/metadata/annotations/kubevirt.io~1eviction-source", "value": "descheduler"}
        )
    return patch
