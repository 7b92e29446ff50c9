"""PodDisruptionBudgets as kube-controller-manager's disruption controller and the eviction REST code read them.

Pure functions: which budgets cover a pod, the status a budget should have, and whether an eviction may proceed
(`pkg/controller/disruption/disruption.go`, `pkg/registry/core/pod/storage/eviction.go`).

Expected pods are the budget's matching pods. kube asks the pods' controllers for their scale instead; for pods
whose controller runs as many pods as it wants, which is the case whenever nothing is being evicted, it is the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.label_selectors import stored_selector
from pykubevirt.apiserver.printers import AGE, NAME, Table, age_cell, column, name_cell, printed_table

Obj = Mapping[str, Any]

# A pod evicted less than this long ago and not yet deleted no longer counts as healthy (DeletionTimeout).
DISRUPTED_POD_TIMEOUT = timedelta(minutes=2)
# Beyond this many evictions not yet observed, kube refuses more (MaxDisruptedPodSize).
MAX_DISRUPTED_PODS = 2000
VIOLATION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_BUDGETS_MESSAGE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def covers(pdb: Obj, pod: Obj) -> bool:
    """Whether the budget's selector selects the pod (a null selector selects none, an empty one all)."""
    if (pdb.get("metadata") or {}).get("namespace") != (pod.get("metadata") or {}).get("namespace"):
        return False
    return stored_selector((pdb.get("spec") or {}).get("selector")).matches((pod.get("metadata") or {}).get("labels"))


def pod_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _resolve(value: Any, total: int, round_up: bool) -> int:
    """An IntOrString against `total` (GetScaledValueFromIntOrPercent)."""
    if isinstance(value, str) and value.endswith("%"):
        scaled = int(value[:-1]) * total / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return int(value)


def _parse_time(value: Any) -> datetime | None:
    try:
        return datetime.strptime(str(value), TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class BudgetCount:
    expected: int
    desired_healthy: int
    current_healthy: int


def count(pdb: Obj, pods: Iterable[Obj], now: datetime) -> tuple[BudgetCount, dict[str, str]]:
    """Expected, desired and current healthy pods, and the disrupted pods still awaiting their deletion."""
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    covered = [p for p in pods if covers(pdb, p)]
    names = {
        str((p.get("metadata") or {}).get("name"))
        for p in covered
        if not (p.get("metadata") or {}).get("deletionTimestamp")
    }
    disrupted: dict[str, str] = {}
    for name, stamp in (status.get("disruptedPods") or {}).items():
        when = _parse_time(stamp)
        # Kept until the pod is gone or being deleted, or the deletion did not come in time.
        if name in names and when is not None and when + DISRUPTED_POD_TIMEOUT > now:
            disrupted[name] = str(stamp)
    expected = len(covered)
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _resolve(spec["maxUnavailable"], expected, round_up=True))
    elif spec.get("minAvailable") is not None:
        desired = _resolve(spec["minAvailable"], expected, round_up=True)
    else:
        desired = 0
    healthy = sum(
        1
        for p in covered
        if not (p.get("metadata") or {}).get("deletionTimestamp")
        and str((p.get("metadata") or {}).get("name")) not in disrupted
        and pod_ready(p)
    )
    return BudgetCount(expected, desired, healthy), disrupted


def budget_status(pdb: Obj, pods: Iterable[Obj], now: datetime) -> dict[str, Any]:
    """The status the disruption controller writes (updatePdbStatus)."""
    counted, disrupted = count(pdb, pods, now)
    allowed = counted.current_healthy - counted.desired_healthy
    if counted.expected <= 0 or allowed <= 0:
        allowed = 0
    previous = {c.get("type"): c for c in (pdb.get("status") or {}).get("conditions") or []}
    state = ("True", "SufficientPods") if allowed > 0 else ("False", "InsufficientPods")
    old = previous.get("DisruptionAllowed")
    transition = old.get("lastTransitionTime") if old and old.get("status") == state[0] else now.strftime(TIME_FORMAT)
    status: dict[str, Any] = {
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": counted.current_healthy,
        "desiredHealthy": counted.desired_healthy,
        "expectedPods": counted.expected,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": state[0],
                "reason": state[1],
                "message": "",
                "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
                "lastTransitionTime": transition,
            }
        ],
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    return status


def _too_many_requests(cause: str) -> errors.APIError:
    return errors.APIError(
        429,
        "TooManyRequests",
        VIOLATION_MESSAGE,
        details={"causes": [{"reason": "DisruptionBudget", "message": cause}]},
    )


def check_eviction(pdb: Obj, pod: Obj, now: datetime) -> dict[str, Any] | None:
    """The budget's status after this eviction, None when the eviction takes nothing from it, or kube's error."""
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    name = str(meta.get("name"))
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 1):
        raise _too_many_requests(f"The disruption budget {name} is still being processed by the server.")
    if not pod_ready(pod):
        # An unhealthy pod may go when the budget is met (IfHealthyBudget) or always (AlwaysAllow).
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        healthy, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
        if policy == "AlwaysAllow" or (healthy >= desired and desired > 0):
            return None
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise errors.forbidden("pdb disruptions allowed is negative")
    disrupted = dict(status.get("disruptedPods") or {})
    if len(disrupted) > MAX_DISRUPTED_PODS:
        raise errors.forbidden("DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
        raise _too_many_requests(
            f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently"
        )
    disrupted[str((pod.get("metadata") or {}).get("name"))] = now.strftime(TIME_FORMAT)
    return {**status, "disruptionsAllowed": allowed - 1, "disruptedPods": disrupted}


def multiple_budgets() -> errors.APIError:
    return errors.internal(MULTIPLE_BUDGETS_MESSAGE)


PDB_COLUMNS = [
    NAME,
    column("Min Available", "The minimum number or percentage of pods that must stay available."),
    column("Max Unavailable", "The maximum number or percentage of pods that may be unavailable."),
    column("Allowed Disruptions", "How many pods may be evicted now.", "integer"),
    AGE,
]


def pdb_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get poddisruptionbudgets."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        spec = obj.get("spec") or {}
        return [
            name_cell(obj),
            str(spec["minAvailable"]) if spec.get("minAvailable") is not None else "N/A",
            str(spec["maxUnavailable"]) if spec.get("maxUnavailable") is not None else "N/A",
            int((obj.get("status") or {}).get("disruptionsAllowed") or 0),
            age_cell(obj, now),
        ]

    return printed_table(PDB_COLUMNS, row, objects, now)
