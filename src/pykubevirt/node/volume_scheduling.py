"""kube-scheduler's VolumeBinding plugin: a pod's claims decide which nodes fit and, for delayed binding, where.

Upstream `pkg/scheduler/framework/plugins/volumebinding`: PreFilter rejects a pod whose claim is missing or is an
unbound claim of an Immediate class; Filter rejects nodes a bound volume's node affinity excludes, and nodes where a
WaitForFirstConsumer claim can neither bind a volume nor be provisioned; PreBind writes the chosen node into the
claim's `volume.kubernetes.io/selected-node` annotation and waits until the PV controller has bound it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.api import volume_binding as vb
from pykubevirt.client.api import Object
from pykubevirt.node.scheduling_predicates import node_selector_matches

ERR_VOLUME_AFFINITY = "node(s) had volume node affinity conflict"
ERR_NO_VOLUME = "node(s) didn't find available persistent volumes to bind"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

Lookup = Callable[[str], Object | None]


@dataclass(slots=True)
class PodClaims:
    """What the pod's claims need: volumes the node must reach, claims still to bind, or why it cannot schedule."""

    bound_volumes: list[Object] = field(default_factory=list)
    delayed: list[Object] = field(default_factory=list)
    error: str = ""


def claim_names(pod: Object) -> list[str]:
    return [
        str(v["persistentVolumeClaim"]["claimName"])
        for v in (pod.get("spec") or {}).get("volumes") or []
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]


def pod_claims(pod: Object, claims: Lookup, volumes: Lookup, classes: Lookup) -> PodClaims:
    """PreFilter: sort the pod's claims into bound and delayed; an error says the pod cannot be placed yet."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    found = PodClaims()
    for name in claim_names(pod):
        pvc = claims(f"{namespace}/{name}")
        if pvc is None:
            found.error = f'persistentvolumeclaim "{name}" not found'
            return found
        if (pvc.get("metadata") or {}).get("deletionTimestamp"):
            found.error = f'persistentvolumeclaim "{name}" is being deleted'
            return found
        volume_name = (pvc.get("spec") or {}).get("volumeName")
        if volume_name and (pvc.get("status") or {}).get("phase") == "Bound":
            pv = volumes(str(volume_name))
            if pv is not None:
                found.bound_volumes.append(pv)
            continue
        sc = classes(vb.storage_class_of(pvc))
        if sc is None or sc.get("volumeBindingMode") != vb.WAIT_FOR_FIRST_CONSUMER or volume_name:
            found.error = ERR_UNBOUND_IMMEDIATE
            return found
        found.delayed.append(pvc)
    return found


def node_volume_reasons(
    node: Mapping[str, Any], needs: PodClaims, all_volumes: Iterable[Object], classes: Lookup
) -> list[str]:
    """Filter: why the node cannot serve the pod's claims (empty when it can)."""
    for pv in needs.bound_volumes:
        terms = vb.node_affinity_terms(pv)
        if terms and not node_selector_matches({"nodeSelectorTerms": terms}, node):
            return [ERR_VOLUME_AFFINITY]
    volumes = list(all_volumes)
    for pvc in needs.delayed:

        def allows(pv: Object) -> bool:
            terms = vb.node_affinity_terms(pv)
            return not terms or node_selector_matches({"nodeSelectorTerms": terms}, node)

        if vb.find_matching_volume(pvc, volumes, allows) is not None:
            continue
        sc = classes(vb.storage_class_of(pvc))
        if sc is None or not sc.get("provisioner") or sc.get("provisioner") == "kubernetes.io/no-provisioner":
            return [ERR_NO_VOLUME]
    return []
