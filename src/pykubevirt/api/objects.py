"""Readers of any Kubernetes object's metadata and status: uid, deletion, phase, conditions, owners, grace period.

apimachinery's meta accessors and the condition helpers every KubeVirt component shares
(`pkg/controller/conditions.go`); they read plain dicts and treat a missing level as Go's zero value.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api.constants import FINAL_PHASES


def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The object's metadata, empty when absent."""
    if obj is None:
        return {}
    return obj.get("metadata") or {}


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The object's spec, empty when absent."""
    if obj is None:
        return {}
    return obj.get("spec") or {}


def status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The object's status, empty when absent."""
    if obj is None:
        return {}
    return obj.get("status") or {}


def labels_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    """The object's metadata.labels, empty when absent or not a map."""
    labels = metadata(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def namespace_of(obj: Mapping[str, Any] | None) -> str:
    """The object's metadata.namespace, "" when unset."""
    return str(metadata(obj).get("namespace") or "")


def uid_of(obj: Mapping[str, Any] | None) -> str:
    """The object's metadata.uid, "" when unset."""
    return str(metadata(obj).get("uid") or "")


def is_marked_for_deletion(obj: Mapping[str, Any] | None) -> bool:
    """True when the object has a deletionTimestamp."""
    return metadata(obj).get("deletionTimestamp") is not None


def vmi_phase(vmi: Mapping[str, Any] | None) -> str:
    """The object's status.phase ("" when unset)."""
    return str(status(vmi).get("phase") or "")


def is_final(vmi: Mapping[str, Any] | None) -> bool:
    """True when the VMI exists and is Succeeded or Failed."""
    return vmi is not None and vmi_phase(vmi) in FINAL_PHASES


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The first status condition of this type, or None."""
    for cond in status(obj).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def condition_true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    """True when the object has a condition of this type with status "True"."""
    return condition_has(obj, type_, "True")


def condition_has(obj: Mapping[str, Any] | None, type_: str, status: str, reason: str | None = None) -> bool:
    """True when the condition of this type has this status (and this reason, when given)."""
    cond = condition(obj, type_)
    if cond is None or cond.get("status") != status:
        return False
    return reason is None or (cond.get("reason") or "") == reason


def controller_owner(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The owner reference of `kind` marked controller (metav1.GetControllerOf, narrowed to a kind), or None."""
    for ref in metadata(obj).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            found: Mapping[str, Any] = ref
            return found
    return None


def grace_period_seconds(obj: Mapping[str, Any]) -> int | None:
    """spec.terminationGracePeriodSeconds of a Pod or VMI, None when unset (each caller has its own default)."""
    value = spec(obj).get("terminationGracePeriodSeconds")
    return int(value) if value is not None else None


def as_aware(value: datetime) -> datetime:
    """Treat a naive datetime as UTC so it compares with parsed timestamps."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
