"""What the VMI replica set controller decides, as pure functions: which VMIs count, which go first, the status.

KubeVirt's replicaset controller (pkg/virt-controller/watch/replicaset): a VMI that is final, or whose pod is
terminating, no longer counts and is deleted so a new one takes its place; one being deleted counts for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.kubevirt.replica_set import REPLICA_FAILURE, REPLICA_PAUSED
from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.api.objects import condition_has, condition_true, is_final, labels_of

Object = dict[str, Any]

# KubeVirt's burstReplicas: creates or deletes at most this many VMIs a sync.
BURST_REPLICAS = 250
POD_TERMINATING = "PodTerminating"


def _deleting(vmi: Mapping[str, Any]) -> bool:
    return bool((vmi.get("metadata") or {}).get("deletionTimestamp"))


def _pod_terminating(vmi: Mapping[str, Any]) -> bool:
    return condition_has(vmi, "Ready", "False", POD_TERMINATING)


def active(vmis: list[Object]) -> list[Object]:
    """VMIs that count toward the replicas: not final, not being deleted, their pod not terminating."""
    return [v for v in vmis if not is_final(v) and not _deleting(v) and not _pod_terminating(v)]


def finished(vmis: list[Object]) -> list[Object]:
    """VMIs to clean away: final ones, then those whose pod is terminating (KubeVirt's "unknown"), not yet deleted."""
    done = [v for v in vmis if is_final(v) and not _deleting(v)]
    return done + [v for v in vmis if not is_final(v) and not _deleting(v) and _pod_terminating(v)]


def ready(vmis: list[Object]) -> list[Object]:
    return [v for v in vmis if condition_true(v, "Ready")]


def wanted_replicas(rs: Mapping[str, Any]) -> int:
    replicas = (rs.get("spec") or {}).get("replicas")
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1


def deletion_order(vmis: list[Object]) -> list[Object]:
    """Who goes first when scaling down: VMIs not yet running, then not ready, then the newest."""
    newest_first = sorted(
        vmis, key=lambda v: str((v.get("metadata") or {}).get("creationTimestamp") or ""), reverse=True
    )
    # A stable sort: within each rank the newest stay first.
    return sorted(
        newest_first,
        key=lambda v: ((v.get("status") or {}).get("phase") == c.PHASE_RUNNING, condition_true(v, "Ready")),
    )


def matches_template(selector: LabelSelector, rs: Mapping[str, Any]) -> bool:
    template = (rs.get("spec") or {}).get("template") or {}
    return selector.matches(labels_of(template))


def base_name(rs: Mapping[str, Any]) -> str:
    """The generateName of the VMIs: the template's name or generateName, else the replica set's name (no dash)."""
    template_meta = ((rs.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return str(template_meta.get("name") or template_meta.get("generateName") or rs["metadata"]["name"])


def new_vmi(rs: Mapping[str, Any], owner: Mapping[str, Any]) -> Object:
    """A VMI of the set: the template's metadata and spec, named by generateName, owned by the set."""
    template = (rs.get("spec") or {}).get("template") or {}
    meta = dict(template.get("metadata") or {})
    meta.pop("name", None)
    meta["generateName"] = base_name(rs)
    labels = (template.get("metadata") or {}).get("labels")
    if labels:
        meta["labels"] = dict(labels)
    meta["ownerReferences"] = [dict(owner)]
    return {"apiVersion": c.KUBEVIRT_API_VERSION, "kind": c.VMI_KIND, "metadata": meta, "spec": template.get("spec")}


def status_of(
    rs: Mapping[str, Any],
    counted: list[Object],
    selector_text: str,
    scale_error: str | None,
    now: str,
) -> Object | None:
    """The status to write, or None when it would not change (KubeVirt writes only then)."""
    status = dict(rs.get("status") or {})
    conditions: list[Object] = [dict(cond) for cond in status.get("conditions") or []]
    has = {cond.get("type") for cond in conditions}
    paused = bool((rs.get("spec") or {}).get("paused"))
    replicas, ready_replicas = len(counted), len(ready(counted))
    unchanged = (
        replicas == (status.get("replicas") or 0)
        and ready_replicas == (status.get("readyReplicas") or 0)
        and (scale_error is not None) == (REPLICA_FAILURE in has)
        and paused == (REPLICA_PAUSED in has)
        and selector_text == (status.get("labelSelector") or "")
    )
    if unchanged:
        return None
    if paused and REPLICA_PAUSED not in has:
        conditions.append(true_condition(REPLICA_PAUSED, "Paused", "Controller got paused", now))
    elif not paused:
        conditions = [cond for cond in conditions if cond.get("type") != REPLICA_PAUSED]
    if scale_error is not None and REPLICA_FAILURE not in has:
        reason = "FailedCreate" if replicas < wanted_replicas(rs) else "FailedDelete"
        conditions.append(true_condition(REPLICA_FAILURE, reason, scale_error, now))
    elif scale_error is None:
        conditions = [cond for cond in conditions if cond.get("type") != REPLICA_FAILURE]
    new: Object = {"replicas": replicas, "readyReplicas": ready_replicas, "labelSelector": selector_text}
    if conditions:
        new["conditions"] = conditions
    # Go's omitempty: zero counts and an empty selector are not written.
    return {k: v for k, v in new.items() if v not in (0, "")}


def true_condition(type_: str, reason: str, message: str, now: str) -> Object:
    return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}
