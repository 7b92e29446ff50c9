"""A VM's run strategy, its pending start/stop requests, and small readers of VM/VMI objects.

Upstream: staging/src/kubevirt.io/api/core/v1/types.go: RunStrategy; pkg/virt-controller/watch/vm/vm.go:
syncRunStrategy, hasStartRequest, hasStopRequestForVMI.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api.constants import (
    FINAL_PHASES,
    PHASE_SUCCEEDED,
    RUN_STRATEGY_ALWAYS,
    RUN_STRATEGY_HALTED,
    RUN_STRATEGY_MANUAL,
    RUN_STRATEGY_ONCE,
    RUN_STRATEGY_RERUN_ON_FAILURE,
)

START_REQUEST = "Start"
STOP_REQUEST = "Stop"
START_REQUEST_PAUSED_KEY = "paused"
START_REQUEST_PAUSED_TRUE = "true"


class RunStrategyError(ValueError):
    """The VM's spec names no single run strategy."""


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if obj is None:
        return {}
    return obj.get("status") or {}


def _metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if obj is None:
        return {}
    return obj.get("metadata") or {}


def uid_of(obj: Mapping[str, Any] | None) -> str:
    """The object's metadata.uid, "" when unset."""
    return str(_metadata(obj).get("uid") or "")


def is_marked_for_deletion(obj: Mapping[str, Any] | None) -> bool:
    """True when the object has a deletionTimestamp."""
    return _metadata(obj).get("deletionTimestamp") is not None


def run_strategy(vm: Mapping[str, Any]) -> str:
    """KubeVirt's `VirtualMachine.RunStrategy()`: `running` maps to Always/Halted, neither set means Halted."""
    spec = vm.get("spec") or {}
    running = spec.get("running")
    strategy = spec.get("runStrategy")
    if running is not None and strategy is not None:
        raise RunStrategyError("running and runstrategy are mutually exclusive")
    if running is not None:
        return RUN_STRATEGY_ALWAYS if running is True else RUN_STRATEGY_HALTED
    if strategy is not None:
        return str(strategy)
    return RUN_STRATEGY_HALTED


def run_strategy_or_none(vm: Mapping[str, Any]) -> str | None:
    """`run_strategy`, or None where upstream's callers log the error and carry on."""
    try:
        return run_strategy(vm)
    except RunStrategyError:
        return None


def vmi_phase(vmi: Mapping[str, Any] | None) -> str:
    """The VMI's status.phase ("" when unset)."""
    return str(_status(vmi).get("phase") or "")


def is_final(vmi: Mapping[str, Any] | None) -> bool:
    """True when the VMI exists and is Succeeded or Failed."""
    return vmi is not None and vmi_phase(vmi) in FINAL_PHASES


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The first status condition of this type, or None."""
    for cond in _status(obj).get("conditions") or []:
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


def state_change_requests(vm: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The VM's status.stateChangeRequests (a copy of the list)."""
    return list(_status(vm).get("stateChangeRequests") or [])


def _first_request(vm: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # Only the head of the queue has been acted upon; later requests wait their turn.
    requests = state_change_requests(vm)
    return requests[0] if requests else None


def has_start_request(vm: Mapping[str, Any]) -> bool:
    """True when the first state change request is a Start."""
    first = _first_request(vm)
    return first is not None and first.get("action") == START_REQUEST


def has_start_paused_request(vm: Mapping[str, Any]) -> bool:
    """True when the first state change request is a Start with data paused=true."""
    first = _first_request(vm)
    if first is None or first.get("action") != START_REQUEST:
        return False
    return (first.get("data") or {}).get(START_REQUEST_PAUSED_KEY) == START_REQUEST_PAUSED_TRUE


def has_stop_request_for_vmi(vm: Mapping[str, Any], vmi: Mapping[str, Any]) -> bool:
    """True when the first state change request is a Stop naming this VMI's uid."""
    first = _first_request(vm)
    if first is None or first.get("action") != STOP_REQUEST:
        return False
    uid = first.get("uid")
    return uid is not None and uid == uid_of(vmi)


def should_start_rerun_on_failure(vm: Mapping[str, Any], strategy: str) -> bool:
    """RerunOnFailure without a VMI starts on a Start request or right after a switch to this strategy."""
    return has_start_request(vm) or (_status(vm).get("runStrategy") or "") != strategy


def is_set_to_start(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, strategy: str | None) -> bool:
    """Whether the VM is meant to be running; `strategy` None (unresolvable) counts as not."""
    if strategy == RUN_STRATEGY_ALWAYS:
        return True
    if strategy == RUN_STRATEGY_MANUAL:
        if vmi is not None:
            return not has_stop_request_for_vmi(vm, vmi)
        return has_start_request(vm)
    if strategy == RUN_STRATEGY_RERUN_ON_FAILURE:
        if vmi is not None:
            return vmi_phase(vmi) != PHASE_SUCCEEDED
        return should_start_rerun_on_failure(vm, strategy)
    if strategy == RUN_STRATEGY_ONCE:
        return vmi is None
    # Halted, WaitAsReceiver, unknown values and unresolvable strategies.
    return False


def as_aware(value: datetime) -> datetime:
    """Treat a naive datetime as UTC so it compares with parsed timestamps."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
