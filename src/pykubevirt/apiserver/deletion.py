"""Kubernetes' deletion rules: DeleteOptions, propagation finalizers, preconditions and the grace period of pods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pykubevirt.api import errors
from pykubevirt.apiserver.resources import Resource

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
BACKGROUND = "Background"
FOREGROUND = "Foreground"
ORPHAN = "Orphan"

DEFAULT_POD_GRACE_SECONDS = 30
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    precondition_uid: str | None = None
    precondition_resource_version: str | None = None
    # DeleteOptions.dryRun, which kubectl and client-go send in the body rather than the query.
    dry_run: bool = False

    @classmethod
    def from_body(cls, body: dict[str, Any] | None, query: dict[str, str]) -> DeleteOptions:
        body = body or {}
        grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        policy = body.get("propagationPolicy") or query.get("propagationPolicy")
        if policy is None and body.get("orphanDependents") is not None:
            policy = ORPHAN if body["orphanDependents"] else BACKGROUND
        preconditions = body.get("preconditions") or {}
        try:
            grace_int = int(grace) if grace is not None else None
        except (TypeError, ValueError) as exc:
            raise errors.bad_request(f"invalid gracePeriodSeconds: {grace!r}") from exc
        if policy not in (None, BACKGROUND, FOREGROUND, ORPHAN):
            raise errors.APIError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "{policy}"',
            )
        dry_run = body.get("dryRun") or []
        if not isinstance(dry_run, list) or any(value != "All" for value in dry_run):
            value = next((v for v in dry_run if v != "All"), "") if isinstance(dry_run, list) else dry_run
            raise errors.bad_request(f'Invalid dryRun value: "{value}": supported values: "All"')
        uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
        return cls(grace_int, policy, uid, version, dry_run=bool(dry_run))


def check_preconditions(resource: Resource, name: str, meta: dict[str, Any], options: DeleteOptions) -> None:
    """A conflict when the object is not the uid or resourceVersion the caller's preconditions name."""
    if options.precondition_uid and options.precondition_uid != meta.get("uid"):
        raise errors.conflict(
            resource.plural,
            resource.group,
            name,
            f"Precondition failed: UID in precondition: {options.precondition_uid}, "
            f"UID in object meta: {meta.get('uid')}",
        )
    if options.precondition_resource_version and options.precondition_resource_version != meta.get("resourceVersion"):
        raise errors.conflict(
            resource.plural,
            resource.group,
            name,
            "Precondition failed: ResourceVersion in precondition: "
            f"{options.precondition_resource_version}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
        )


def propagation_finalizers(meta: dict[str, Any], options: DeleteOptions) -> list[str]:
    """The object's finalizers plus the one its propagation policy asks of the garbage collector."""
    stored = meta.get("finalizers")
    # Only a list is finalizers (an older version may have stored a string); anything else counts as none.
    finalizers = [f for f in stored if isinstance(f, str)] if isinstance(stored, list) else []
    if options.propagation_policy == ORPHAN and ORPHAN_FINALIZER not in finalizers:
        finalizers.append(ORPHAN_FINALIZER)
    if options.propagation_policy == FOREGROUND and FOREGROUND_FINALIZER not in finalizers:
        finalizers.append(FOREGROUND_FINALIZER)
    return finalizers


def pod_grace_period(resource: Resource, obj: dict[str, Any], options: DeleteOptions) -> int | None:
    """Pods bound to a node end gracefully: the node kills the containers, then deletes with grace 0."""
    if resource.kind != "Pod" or resource.group:
        return None
    spec = obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return None
    grace = options.grace_period_seconds
    if grace is None:
        grace = int(spec.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE_SECONDS))
    current = (obj.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if current is not None and grace >= int(current):
        return int(current)
    return max(grace, 0)


def ready_to_remove(obj: dict[str, Any]) -> bool:
    """Marked for deletion with nothing left to wait for: no finalizers and no grace period."""
    meta = obj.get("metadata") or {}
    # A terminating namespace keeps its spec.finalizers until the garbage collector emptied it.
    namespace_finalizers = obj.get("kind") == "Namespace" and (obj.get("spec") or {}).get("finalizers")
    return (
        bool(meta.get("deletionTimestamp"))
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
        and not namespace_finalizers
    )
