"""Whether a VM is meant to run, and what to do about it: the head of its state change request queue and the
RunStrategy table (`decide`). Pure.

Upstream: pkg/virt-controller/watch/vm/vm.go: syncRunStrategy, hasStartRequest, hasStopRequestForVMI, isSetToStart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pykubevirt.api.constants import (
    CREATE_MIGRATION_TARGET_ANNOTATION,
    FINAL_PHASES,
    PHASE_FAILED,
    PHASE_SUCCEEDED,
    RUN_STRATEGY_ALWAYS,
    RUN_STRATEGY_HALTED,
    RUN_STRATEGY_MANUAL,
    RUN_STRATEGY_ONCE,
    RUN_STRATEGY_RERUN_ON_FAILURE,
    RUN_STRATEGY_WAIT_AS_RECEIVER,
)
from pykubevirt.api.objects import is_final, is_marked_for_deletion, metadata, status, uid_of, vmi_phase
from pykubevirt.api.vm_run_strategy import (
    START_REQUEST,
    START_REQUEST_PAUSED_KEY,
    START_REQUEST_PAUSED_TRUE,
    STOP_REQUEST,
    state_change_requests,
)


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
    return has_start_request(vm) or (status(vm).get("runStrategy") or "") != strategy


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


# ---------------------------------------------------------------------------------------------- the decision table
# pkg/virt-controller/watch/vm/vm.go: syncRunStrategy, as a pure function; VMController carries the action out.

FAILED_CREATE = "FailedCreate"


class Act(Enum):
    """What syncRunStrategy does to the VM's VMI."""

    NOTHING = "nothing"
    START = "start"
    STOP = "stop"
    # RerunOnFailure after a failure: delete the VMI, then queue a Start request so the next VMI follows.
    STOP_THEN_REQUEST_START = "stop-then-request-start"
    # Halted with a Start request (a start-paused): set the spec to Always; the next sync starts the VMI.
    SWITCH_HALTED_TO_ALWAYS = "switch-halted-to-always"
    WAIT_FOR_BACKOFF = "wait-for-backoff"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Action:
    """One run-strategy decision: the act, the seconds to wait (backoff) or the sync error (message, reason)."""

    act: Act
    wait_seconds: float = 0.0
    message: str = ""
    reason: str = ""


NOTHING = Action(Act.NOTHING)
START = Action(Act.START)
STOP = Action(Act.STOP)


def _stop(vmi: Mapping[str, Any]) -> Action:
    # stopVMI does nothing to a VMI that is already terminating.
    return NOTHING if is_marked_for_deletion(vmi) else STOP


def _start_after_backoff(backoff_left: float) -> Action:
    if backoff_left > 0:
        return Action(Act.WAIT_FOR_BACKOFF, wait_seconds=backoff_left)
    return START


def _always(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, backoff_left: float) -> Action:
    if vmi is None:
        return _start_after_backoff(backoff_left)
    # A final VMI is deleted so that the next sync starts a new one; a stop request is a forced restart.
    if has_stop_request_for_vmi(vm, vmi) or is_final(vmi):
        return _stop(vmi)
    return NOTHING


def _rerun_on_failure(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, backoff_left: float) -> Action:
    if vmi is None:
        if should_start_rerun_on_failure(vm, RUN_STRATEGY_RERUN_ON_FAILURE):
            return _start_after_backoff(backoff_left)
        return NOTHING
    phase = vmi_phase(vmi)
    if is_marked_for_deletion(vmi) or not (has_stop_request_for_vmi(vm, vmi) or phase in FINAL_PHASES):
        return NOTHING
    # Only a failure is rerun; after Succeeded the VM stays stopped.
    return Action(Act.STOP_THEN_REQUEST_START) if phase == PHASE_FAILED else STOP


def _manual(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, backoff_left: float) -> Action:
    if vmi is None:
        return START if has_start_request(vm) else NOTHING
    # A final VMI is kept: Manual restarts only on request.
    return _stop(vmi) if has_stop_request_for_vmi(vm, vmi) else NOTHING


def _halted(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, backoff_left: float) -> Action:
    if vmi is None:
        return Action(Act.SWITCH_HALTED_TO_ALWAYS) if has_start_request(vm) else NOTHING
    return _stop(vmi)


def _once(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, backoff_left: float) -> Action:
    # Once never restarts and ignores stop requests: a final VMI stays.
    return START if vmi is None else NOTHING


def _wait_as_receiver(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, backoff_left: float) -> Action:
    if vmi is None:
        return START
    annotations = metadata(vmi).get("annotations") or {}
    if annotations.get(CREATE_MIGRATION_TARGET_ANNOTATION) == "true":
        return NOTHING
    # A receiver that completed its migration has become the VM's ordinary VMI.
    if (status(vmi).get("migrationState") or {}).get("completed"):
        return NOTHING
    return Action(Act.ERROR, message="Found non receiver VMI while VM is receiver", reason=FAILED_CREATE)


_TABLE: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any] | None, float], Action]] = {
    RUN_STRATEGY_ALWAYS: _always,
    RUN_STRATEGY_RERUN_ON_FAILURE: _rerun_on_failure,
    RUN_STRATEGY_MANUAL: _manual,
    RUN_STRATEGY_HALTED: _halted,
    RUN_STRATEGY_ONCE: _once,
    RUN_STRATEGY_WAIT_AS_RECEIVER: _wait_as_receiver,
}


def decide(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None, strategy: str, *, backoff_left: float = 0.0) -> Action:
    """What syncRunStrategy does for this VM, its VMI (None when absent) and the seconds of start backoff left."""
    row = _TABLE.get(strategy)
    if row is None:
        return Action(Act.ERROR, message=f"unknown runstrategy: {strategy}", reason=FAILED_CREATE)
    return row(vm, vmi, backoff_left)
