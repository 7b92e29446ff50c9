"""VM start/stop/restart as KubeVirt's virt-api decides them (pkg/virt-api/rest/lifecycle.go).

Pure: a VM, its VMI (or None) and the request's options in; a Plan of JSON patches (or a Status error) out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import errors
from pykubevirt.api.objects import condition_true, grace_period_seconds, is_final, uid_of, vmi_phase
from pykubevirt.api.vm_run_strategy import (
    START_REQUEST,
    START_REQUEST_PAUSED_KEY,
    START_REQUEST_PAUSED_TRUE,
    STOP_REQUEST,
    RunStrategyError,
    run_strategy,
)
from pykubevirt.virtapi.options import RestartOptions, StartOptions, StopOptions, is_dry_run, parse_start

Patch = list[dict[str, Any]]

VM_RESOURCE = "virtualmachine"
VMI_RESOURCE = "virtualmachineinstance"
VM_NOT_RUNNING = "VM is not running"
ALREADY_UNDERWAY = "unable to complete request: stop/start already underway"
RECOVERY_REQUIRED = (
    "VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent targets; "
    "manual intervention is needed to reassign them to their original volumes."
)
MANUAL_RECOVERY_REQUIRED = "ManualRecoveryRequired"
VOLUMES_CHANGE = "VolumesChange"
GRACE_PATH = "/spec/terminationGracePeriodSeconds"
REQUESTS_PATH = "/status/stateChangeRequests"


@dataclass(frozen=True, slots=True)
class Plan:
    """What a VM subresource call writes, in order: `vmi_patch`, then `error` or the VM patches.

    Upstream patches the VMI's grace period before deciding; `rollback` restores it when the status patch fails.
    """

    vmi_patch: Patch | None = None
    error: errors.APIError | None = None
    vm_patch: Patch | None = None
    status_patch: Patch | None = None
    rollback: Patch | None = None
    dry_run: bool = False


class RequestsUnderway(Exception):
    """A start or restart request while other state change requests are pending."""


def vm_conflict(name: str, why: str) -> errors.APIError:
    return errors.conflict(VM_RESOURCE, c.KUBEVIRT_GROUP, name, why)


def vmi_conflict(name: str, why: str) -> errors.APIError:
    return errors.conflict(VMI_RESOURCE, c.KUBEVIRT_GROUP, name, why)


def name_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def change_request(action: str, *, uid: str | None = None, data: dict[str, str] | None = None) -> dict[str, Any]:
    """A VirtualMachineStateChangeRequest as Go serialises it (empty data and uid omitted)."""
    request: dict[str, Any] = {"action": action}
    if data:
        request["data"] = dict(data)
    if uid:
        request["uid"] = uid
    return request


def _is_zero(value: Any) -> bool:
    return value is None or value is False or value == "" or value == 0 or value == []


def status_is_empty(vm: dict[str, Any]) -> bool:
    """`equality.Semantic.DeepEqual(vm.Status, VirtualMachineStatus{})`: absent, or every field at its zero value."""
    status = vm.get("status")
    if not status:
        return True
    # Pointer fields (startFailure, memoryDumpRequest…) count as set even when empty, as a non-nil pointer does.
    return all(_is_zero(value) for value in status.values())


def change_request_patch(vm: dict[str, Any], *changes: dict[str, Any]) -> Patch:
    """The status JSON patch queueing `changes` (upstream getChangeRequestJson); RequestsUnderway when it can't."""
    if status_is_empty(vm):
        return [{"op": "add", "path": "/status", "value": {"stateChangeRequests": list(changes)}}]
    status = vm.get("status") or {}
    current = status.get("stateChangeRequests")
    patch: Patch = [{"op": "test", "path": REQUESTS_PATH, "value": current}]
    if not current:
        patch.append({"op": "add", "path": REQUESTS_PATH, "value": list(changes)})
    elif len(changes) == 1 and changes[0]["action"] == STOP_REQUEST:
        # A stop overrides whatever is pending.
        patch.append({"op": "replace", "path": REQUESTS_PATH, "value": list(changes)})
    else:
        raise RequestsUnderway(ALREADY_UNDERWAY)
    if status.get("startFailure") is not None:
        patch.append({"op": "remove", "path": "/status/startFailure"})
    return patch


def running_patch(vm: dict[str, Any], running: bool) -> Patch:
    """Switch the VM on or off: runStrategy Always/Halted, or `running` for VMs that still use it."""
    spec = vm.get("spec") or {}
    if spec.get("runStrategy") is not None:
        wanted = c.RUN_STRATEGY_ALWAYS if running else c.RUN_STRATEGY_HALTED
        return [
            {"op": "test", "path": "/spec/runStrategy", "value": spec["runStrategy"]},
            {"op": "replace", "path": "/spec/runStrategy", "value": wanted},
        ]
    return [
        {"op": "test", "path": "/spec/running", "value": spec.get("running")},
        {"op": "replace", "path": "/spec/running", "value": running},
    ]


def grace_period_patch(vmi: dict[str, Any], grace: int) -> Patch:
    """Set the VMI's terminationGracePeriodSeconds, guarded by a test of the value read."""
    return [
        {"op": "test", "path": GRACE_PATH, "value": grace_period_seconds(vmi)},
        {"op": "replace", "path": GRACE_PATH, "value": grace},
    ]


def _strategy(vm: dict[str, Any]) -> str:
    try:
        return run_strategy(vm)
    except RunStrategyError as exc:
        raise errors.internal(str(exc)) from exc


def _status_plan(vm: dict[str, Any], *changes: dict[str, Any], vmi_patch: Patch | None = None) -> Plan:
    try:
        return Plan(vmi_patch=vmi_patch, status_patch=change_request_patch(vm, *changes))
    except RequestsUnderway as exc:
        return Plan(vmi_patch=vmi_patch, error=errors.internal(str(exc)))


def decide_start(vm: dict[str, Any], vmi: dict[str, Any] | None, body: bytes) -> Plan:
    """PUT virtualmachines/{name}/start. The body is decoded after the state checks, as upstream does."""
    name = name_of(vm)
    if vmi is not None and not is_final(vmi) and vmi_phase(vmi) not in (c.PHASE_UNSET, c.PHASE_UNKNOWN):
        raise vm_conflict(name, "VM is already running")
    if condition_true(vm, MANUAL_RECOVERY_REQUIRED):
        raise vm_conflict(name, RECOVERY_REQUIRED)
    options = parse_start(body)
    return dataclasses.replace(_start_plan(vm, vmi, options), dry_run=is_dry_run(options.dry_run))


def _start_plan(vm: dict[str, Any], vmi: dict[str, Any] | None, options: StartOptions) -> Plan:
    name = name_of(vm)
    data = {START_REQUEST_PAUSED_KEY: START_REQUEST_PAUSED_TRUE} if options.paused else None
    strategy = _strategy(vm)
    if strategy == c.RUN_STRATEGY_HALTED:
        if options.paused:
            # virt-controller switches the RunStrategy when it sees this request.
            return _status_plan(vm, change_request(START_REQUEST, data=data))
        return Plan(vm_patch=running_patch(vm, True))
    if strategy in (c.RUN_STRATEGY_MANUAL, c.RUN_STRATEGY_RERUN_ON_FAILURE):
        phase = vmi_phase(vmi) if vmi is not None else None
        if strategy == c.RUN_STRATEGY_RERUN_ON_FAILURE and phase == c.PHASE_FAILED:
            raise vm_conflict(name, f"{c.RUN_STRATEGY_RERUN_ON_FAILURE} does not support starting VM from failed state")
        needs_restart = (strategy == c.RUN_STRATEGY_RERUN_ON_FAILURE and phase == c.PHASE_SUCCEEDED) or (
            strategy == c.RUN_STRATEGY_MANUAL and is_final(vmi)
        )
        if needs_restart:
            stop = change_request(STOP_REQUEST, uid=uid_of(vmi))
            return _status_plan(vm, stop, change_request(START_REQUEST, data=data))
        return _status_plan(vm, change_request(START_REQUEST, data=data))
    if strategy in (c.RUN_STRATEGY_ALWAYS, c.RUN_STRATEGY_ONCE):
        raise vm_conflict(name, f"{strategy} does not support manual start requests")
    # Upstream's switch has no case for other strategies (WaitAsReceiver): accepted, nothing written.
    return Plan()


def decide_stop(vm: dict[str, Any], vmi: dict[str, Any] | None, options: StopOptions) -> Plan:
    """PUT virtualmachines/{name}/stop."""
    return dataclasses.replace(_stop_plan(vm, vmi, options), dry_run=is_dry_run(options.dry_run))


def _stop_plan(vm: dict[str, Any], vmi: dict[str, Any] | None, options: StopOptions) -> Plan:
    name = name_of(vm)
    strategy = _strategy(vm)
    alive = vmi is not None and not is_final(vmi)
    vmi_patch = None
    if alive and options.grace_period is not None:
        assert vmi is not None
        vmi_patch = grace_period_patch(vmi, options.grace_period)
    if strategy == c.RUN_STRATEGY_HALTED:
        if not alive:
            raise vm_conflict(name, VM_NOT_RUNNING)
        assert vmi is not None
        current = grace_period_seconds(vmi)
        grace = options.grace_period
        if grace is None or (current is not None and grace >= current):
            # The grace period patch has been sent by then, as upstream sends it before this check.
            why = f"{c.RUN_STRATEGY_HALTED} only supports manual stop requests with a shorter graceperiod"
            return Plan(vmi_patch=vmi_patch, error=vm_conflict(name, why))
        return _status_plan(vm, change_request(STOP_REQUEST, uid=uid_of(vmi)), vmi_patch=vmi_patch)
    if strategy in (c.RUN_STRATEGY_MANUAL, c.RUN_STRATEGY_RERUN_ON_FAILURE):
        if not alive:
            raise vm_conflict(name, VM_NOT_RUNNING)
        # virt-controller stops the VMI and the VM keeps its RunStrategy.
        return _status_plan(vm, change_request(STOP_REQUEST, uid=uid_of(vmi)), vmi_patch=vmi_patch)
    if strategy in (c.RUN_STRATEGY_ALWAYS, c.RUN_STRATEGY_ONCE):
        return Plan(vmi_patch=vmi_patch, vm_patch=running_patch(vm, False))
    return Plan(vmi_patch=vmi_patch)


def check_restart_options(options: RestartOptions) -> None:
    """The 400s of a restart, answered before anything is read."""
    grace = options.grace_period_seconds
    if grace is not None and grace > 0:
        raise errors.bad_request("For force restart, only gracePeriod=0 is supported for now")
    if grace is not None and grace < 0:
        raise errors.bad_request("gracePeriod has to be greater or equal to 0")


def decide_restart(vm: dict[str, Any], vmi: dict[str, Any] | None, options: RestartOptions) -> Plan:
    """PUT virtualmachines/{name}/restart: Stop the current VMI, then Start a new one."""
    check_restart_options(options)
    name = name_of(vm)
    if condition_true(vm, VOLUMES_CHANGE):
        raise vm_conflict(name, RECOVERY_REQUIRED)
    strategy = _strategy(vm)
    if strategy in (c.RUN_STRATEGY_HALTED, c.RUN_STRATEGY_ONCE):
        raise vm_conflict(name, f"RunStategy {strategy} does not support manual restart requests")
    if vmi is None:
        raise vm_conflict(name, f"{VM_NOT_RUNNING}: {c.RUN_STRATEGY_HALTED}")
    vmi_patch = rollback = None
    if options.grace_period_seconds == 0:
        # 1 s is the shortest safe restart period; virt-handler then shuts the guest down promptly.
        vmi_patch = grace_period_patch(vmi, 1)
        old = grace_period_seconds(vmi)
        restore: dict[str, Any] = (
            {"op": "remove", "path": GRACE_PATH} if old is None else {"op": "replace", "path": GRACE_PATH, "value": old}
        )
        rollback = [{"op": "test", "path": GRACE_PATH, "value": 1}, restore]
    plan = _status_plan(
        vm, change_request(STOP_REQUEST, uid=uid_of(vmi)), change_request(START_REQUEST), vmi_patch=vmi_patch
    )
    return dataclasses.replace(plan, rollback=rollback, dry_run=is_dry_run(options.dry_run))
