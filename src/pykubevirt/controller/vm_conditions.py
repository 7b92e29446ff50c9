"""VM status conditions and the plain status fields `updateStatus` derives from the VMI.

Upstream: pkg/virt-controller/watch/vm/vm.go: updateStatus, syncConditions, syncReadyConditionFromVMI,
processFailureCondition, isTrimFirstChangeRequestNeeded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.constants import VM_GENERATION_ANNOTATION
from pykubevirt.api.objects import condition, condition_true, is_final, is_marked_for_deletion, uid_of
from pykubevirt.api.vm_run_strategy import START_REQUEST, STOP_REQUEST, run_strategy_or_none, state_change_requests

COND_READY = "Ready"
COND_FAILURE = "Failure"
COND_RESTART_REQUIRED = "RestartRequired"
COND_MANUAL_RECOVERY_REQUIRED = "ManualRecoveryRequired"

REASON_VMI_NOT_EXISTS = "VMINotExists"
MESSAGE_VMI_NOT_EXISTS = "VMI does not exist"
REASON_VMI_CONDITION_MISSING = "VMIConditionMissing"
MESSAGE_VMI_CONDITION_MISSING = "VMI is missing the Ready condition"
MESSAGE_RESTART_REQUIRED = "a non-live-updatable field was changed in the template spec"

# The VM controller owns these; every other VMI condition type is mirrored onto the VM.
NOT_MIRRORED = frozenset({COND_READY, COND_FAILURE, COND_RESTART_REQUIRED})

# strconv.ParseInt's syntax: an optional sign and decimal digits, nothing else.
_INT_RE = re.compile(r"[+-]?[0-9]+")


def make_condition(
    type_: str,
    status: str,
    *,
    reason: str = "",
    message: str = "",
    last_probe_time: str | None = None,
    last_transition_time: str | None = None,
) -> dict[str, Any]:
    """A condition as KubeVirt serialises it: unset times are null, empty reason and message are left out."""
    cond: dict[str, Any] = {
        "type": type_,
        "status": status,
        "lastProbeTime": last_probe_time,
        "lastTransitionTime": last_transition_time,
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def update_condition(conditions: list[dict[str, Any]], cond: dict[str, Any]) -> None:
    """Add `cond`, or replace the one of its type only if status or reason changed (message and times stay)."""
    for index, existing in enumerate(conditions):
        if existing.get("type") != cond["type"]:
            continue
        if existing.get("status") != cond.get("status") or (existing.get("reason") or "") != (cond.get("reason") or ""):
            conditions[index] = cond
        return
    conditions.append(cond)


def remove_condition(conditions: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    """The conditions without any of this type."""
    return [cond for cond in conditions if cond.get("type") != type_]


def _copy_vmi_condition(cond: Mapping[str, Any], type_: str | None = None) -> dict[str, Any]:
    return make_condition(
        type_ or str(cond.get("type") or ""),
        str(cond.get("status") or ""),
        reason=str(cond.get("reason") or ""),
        message=str(cond.get("message") or ""),
        last_probe_time=cond.get("lastProbeTime"),
        last_transition_time=cond.get("lastTransitionTime"),
    )


def vm_conditions(
    vm: Mapping[str, Any],
    vmi: Mapping[str, Any] | None,
    *,
    sync_error: tuple[str, str] | None,
    now: str,
    restart_required: bool | str | None,
) -> list[dict[str, Any]]:
    """The VM's new status.conditions; `sync_error` is (reason, message).

    `restart_required`: True (KubeVirt's generic message) or a message sets it, False removes it, None leaves it."""
    conditions = [dict(c) for c in (vm.get("status") or {}).get("conditions") or []]

    # RestartRequired is decided in sync (before updateStatus), so it goes first, as upstream orders it.
    if restart_required is True or isinstance(restart_required, str):
        message = MESSAGE_RESTART_REQUIRED if restart_required is True else str(restart_required)
        existing = next((x for x in conditions if x.get("type") == COND_RESTART_REQUIRED), None)
        if existing is not None and existing.get("message") not in (None, "", message):
            # Another reason to restart than the one shown: the condition says the current one.
            conditions = remove_condition(conditions, COND_RESTART_REQUIRED)
        update_condition(
            conditions, make_condition(COND_RESTART_REQUIRED, "True", message=message, last_transition_time=now)
        )
    elif restart_required is False:
        conditions = remove_condition(conditions, COND_RESTART_REQUIRED)

    vmi_ready = condition(vmi, COND_READY)
    if vmi is None:
        ready = make_condition(
            COND_READY,
            "False",
            reason=REASON_VMI_NOT_EXISTS,
            message=MESSAGE_VMI_NOT_EXISTS,
            last_probe_time=now,
            last_transition_time=now,
        )
    elif vmi_ready is None:
        ready = make_condition(
            COND_READY,
            "False",
            reason=REASON_VMI_CONDITION_MISSING,
            message=MESSAGE_VMI_CONDITION_MISSING,
            last_probe_time=now,
            last_transition_time=now,
        )
    else:
        ready = _copy_vmi_condition(vmi_ready, COND_READY)
    update_condition(conditions, ready)

    if sync_error is None:
        conditions = remove_condition(conditions, COND_FAILURE)
    else:
        reason, message = sync_error
        update_condition(
            conditions, make_condition(COND_FAILURE, "True", reason=reason, message=message, last_transition_time=now)
        )

    # Without a VMI the mirrored conditions (ManualRecoveryRequired among them) are left untouched.
    if vmi is None:
        return conditions

    mirrored: set[str] = set()
    for cond in (vmi.get("status") or {}).get("conditions") or []:
        type_ = str(cond.get("type") or "")
        if type_ in NOT_MIRRORED:
            continue
        mirrored.add(type_)
        update_condition(conditions, _copy_vmi_condition(cond))
    return [c for c in conditions if c.get("type") in NOT_MIRRORED or c.get("type") in mirrored]


def _generation_annotation(vmi: Mapping[str, Any]) -> int | None:
    annotations = (vmi.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(VM_GENERATION_ANNOTATION)
    if not isinstance(value, str) or not _INT_RE.fullmatch(value):
        return None
    return int(value)


def status_fields(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None) -> dict[str, Any]:
    """created, ready, observed/desiredGeneration and runStrategy to merge into status; absent keys stay as they are."""
    status = vm.get("status") or {}
    created = vmi is not None
    fields: dict[str, Any] = {"created": created, "ready": created and condition_true(vmi, COND_READY)}
    if vmi is not None:
        # Without a readable annotation upstream back-fills it from the start ControllerRevision; that is I/O, so the
        # generations are then left as they are.
        generation = _generation_annotation(vmi)
        if generation is not None:
            fields["observedGeneration"] = generation
            fields["desiredGeneration"] = int((vm.get("metadata") or {}).get("generation") or 0)
    # Recorded only once the VM got a VMI, so that a later switch to RerunOnFailure can be told from a never-started VM.
    if status.get("runStrategy") or created:
        # An unresolvable strategy is written as "", upstream's RunStrategyUnknown.
        fields["runStrategy"] = run_strategy_or_none(vm) or ""
    return fields


def trim_state_change_requests(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """status.stateChangeRequests with the first one dropped once it is done (at most one per loop)."""
    requests = state_change_requests(vm)
    if not requests:
        return requests
    first = requests[0]
    action = first.get("action")
    done = False
    if action == STOP_REQUEST:
        # A Stop is done once its VMI is gone; one without a uid can never be acted upon.
        done = vmi is None or first.get("uid") is None or first.get("uid") != uid_of(vmi)
    elif action == START_REQUEST:
        done = vmi is not None and not is_marked_for_deletion(vmi) and not is_final(vmi)
    return requests[1:] if done else requests
