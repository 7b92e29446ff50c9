"""Whether a VM is meant to run: its run strategy and the head of its state change request queue.

Upstream: pkg/virt-controller/watch/vm/vm.go: syncRunStrategy, hasStartRequest, hasStopRequestForVMI.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.constants import (
    PHASE_SUCCEEDED,
    RUN_STRATEGY_ALWAYS,
    RUN_STRATEGY_MANUAL,
    RUN_STRATEGY_ONCE,
    RUN_STRATEGY_RERUN_ON_FAILURE,
)
from pykubevirt.api.objects import status, uid_of, vmi_phase
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
