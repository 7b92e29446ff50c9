"""virt-api's decisions for start/stop/restart and the VMI subresources, mirroring upstream rest/subresource_test.go."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pykubevirt.api.errors import APIError
from pykubevirt.virtapi.lifecycle import (
    Plan,
    change_request,
    change_request_patch,
    decide_restart,
    decide_start,
    decide_stop,
    running_patch,
)
from pykubevirt.virtapi.options import RestartOptions, StopOptions, parse_pause, parse_restart, parse_start, parse_stop
from pykubevirt.virtapi.vmi_checks import (
    check_console,
    check_freeze,
    check_guest_agent,
    check_handler_reachable,
    check_pause,
    check_soft_reboot,
    check_unfreeze,
    check_unpause,
    check_unpause_vm,
    check_vnc,
    reset_failure,
)

NAME = "testvm"
UID = "3c5a4a58-uid"
DRY = ("All",)


def vm(run_strategy: str | None = None, running: bool | None = None, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {}}}
    if run_strategy is not None:
        spec["runStrategy"] = run_strategy
    if running is not None:
        spec["running"] = running
    obj: dict[str, Any] = {"metadata": {"name": NAME, "namespace": "default"}, "spec": spec}
    if status:
        obj["status"] = status
    return obj


def vmi(phase: str = "Running", grace: int | None = None, *conditions: str, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": NAME, "namespace": "default", "uid": UID},
        "spec": dict(spec),
        "status": {"phase": phase, "conditions": [{"type": t, "status": "True"} for t in conditions]},
    }
    if grace is not None:
        obj["spec"]["terminationGracePeriodSeconds"] = grace
    return obj


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def conflict(exc: pytest.ExceptionInfo[APIError] | APIError, why: str, resource: str = "virtualmachine") -> None:
    error = exc.value if isinstance(exc, pytest.ExceptionInfo) else exc
    assert error.code == 409 and error.reason == "Conflict"
    assert error.message == f'Operation cannot be fulfilled on {resource}.kubevirt.io "{NAME}": {why}'


STOP = {"action": "Stop", "uid": UID}
START = {"action": "Start"}


def requests_of(plan: Plan) -> list[dict[str, Any]]:
    assert plan.status_patch is not None and plan.error is None
    op = next(op for op in plan.status_patch if op["op"] in ("add", "replace"))
    return op["value"]["stateChangeRequests"] if op["path"] == "/status" else op["value"]


# ------------------------------------------------------------------------------------------------------ restart


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"running": False}, "RunStategy Halted does not support manual restart requests"),
        ({"run_strategy": "Halted"}, "RunStategy Halted does not support manual restart requests"),
        ({"run_strategy": "Manual"}, "VM is not running: Halted"),
    ],
)
def test_restart_errors_when_not_running(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(APIError) as exc:
        decide_restart(vm(**spec), None, RestartOptions())
    conflict(exc, message)


@pytest.mark.parametrize("grace", [600, None])
@pytest.mark.parametrize("dry_run", [(), DRY])
def test_force_restart_patches_grace_period_first(grace: int | None, dry_run: tuple[str, ...]) -> None:
    plan = decide_restart(vm(running=True), vmi(grace=grace), RestartOptions(grace_period_seconds=0, dry_run=dry_run))
    assert plan.vmi_patch == [
        {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": grace},
        {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 1},
    ]
    assert requests_of(plan) == [STOP, START]
    assert plan.dry_run == bool(dry_run)
    assert plan.rollback is not None and plan.rollback[0] == {
        "op": "test",
        "path": "/spec/terminationGracePeriodSeconds",
        "value": 1,
    }
    restore = plan.rollback[1]
    assert restore == (
        {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 600}
        if grace
        else {"op": "remove", "path": "/spec/terminationGracePeriodSeconds"}
    )


def test_restart_queues_stop_then_start() -> None:
    plan = decide_restart(vm(running=True), vmi(), RestartOptions())
    assert plan.vmi_patch is None and plan.rollback is None
    assert plan.status_patch == [{"op": "add", "path": "/status", "value": {"stateChangeRequests": [STOP, START]}}]


def test_restart_refused_while_volumes_change() -> None:
    changing = vm("Always", conditions=[{"type": "VolumesChange", "status": "True"}])
    with pytest.raises(APIError) as exc:
        decide_restart(changing, vmi(), RestartOptions())
    assert exc.value.code == 409 and "VM recovery required" in exc.value.message


@pytest.mark.parametrize("strategy", ["Always", "Manual", "RerunOnFailure"])
def test_restart_of_failed_vmi_is_accepted(strategy: str) -> None:
    assert requests_of(decide_restart(vm(strategy), vmi("Failed"), RestartOptions())) == [STOP, START]


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        ("Always", "VM is not running: Halted"),
        ("Manual", "VM is not running: Halted"),
        ("RerunOnFailure", "VM is not running: Halted"),
        ("Once", "RunStategy Once does not support manual restart requests"),
        ("Halted", "RunStategy Halted does not support manual restart requests"),
    ],
)
@pytest.mark.parametrize("dry_run", [(), DRY])
def test_restart_without_vmi(strategy: str, message: str, dry_run: tuple[str, ...]) -> None:
    with pytest.raises(APIError) as exc:
        decide_restart(vm(strategy), None, RestartOptions(dry_run=dry_run))
    conflict(exc, message)


@pytest.mark.parametrize(
    ("grace", "message"),
    [
        (5, "For force restart, only gracePeriod=0 is supported for now"),
        (-1, "gracePeriod has to be greater or equal to 0"),
    ],
)
def test_restart_grace_period_validation(grace: int, message: str) -> None:
    with pytest.raises(APIError) as exc:
        decide_restart(vm("Always"), vmi(), parse_restart(body(gracePeriodSeconds=grace)))
    assert (exc.value.code, exc.value.reason, exc.value.message) == (400, "BadRequest", message)


def test_restart_while_requests_pending_is_an_internal_error() -> None:
    plan = decide_restart(vm("Always", stateChangeRequests=[START]), vmi(), RestartOptions())
    assert plan.error is not None and plan.error.code == 500
    assert plan.error.message == "Internal error occurred: unable to complete request: stop/start already underway"


# ------------------------------------------------------------------------------------------------------ stop


@pytest.mark.parametrize("phase", ["Running", "Failed"])
@pytest.mark.parametrize("dry_run", [(), DRY])
def test_force_stop(phase: str, dry_run: tuple[str, ...]) -> None:
    plan = decide_stop(vm(running=True), vmi(phase, 1800), StopOptions(grace_period=0, dry_run=dry_run))
    # A final VMI's grace period is left alone.
    assert plan.vmi_patch == (
        [
            {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": 1800},
            {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 0},
        ]
        if phase == "Running"
        else None
    )
    assert plan.vm_patch == [
        {"op": "test", "path": "/spec/running", "value": True},
        {"op": "replace", "path": "/spec/running", "value": False},
    ]
    assert plan.dry_run == bool(dry_run)


@pytest.mark.parametrize(
    ("strategy", "error"),
    [("Always", False), ("Once", False), ("RerunOnFailure", True), ("Manual", True), ("Halted", True)],
)
@pytest.mark.parametrize("dry_run", [(), DRY])
def test_stop_without_vmi(strategy: str, error: bool, dry_run: tuple[str, ...]) -> None:
    if error:
        with pytest.raises(APIError) as exc:
            decide_stop(vm(strategy), None, StopOptions(dry_run=dry_run))
        conflict(exc, "VM is not running")
        return
    plan = decide_stop(vm(strategy), None, StopOptions(dry_run=dry_run))
    assert plan.vm_patch == [
        {"op": "test", "path": "/spec/runStrategy", "value": strategy},
        {"op": "replace", "path": "/spec/runStrategy", "value": "Halted"},
    ]
    assert plan.status_patch is None and plan.dry_run == bool(dry_run)


def test_stop_halted_with_unknown_vmi() -> None:
    plan = decide_stop(vm("Halted"), vmi("Unknown"), StopOptions())
    assert plan.error is not None
    conflict(plan.error, "Halted only supports manual stop requests with a shorter graceperiod")


@pytest.mark.parametrize(
    ("termination", "grace", "fails"),
    [(1800, None, True), (1800, 1800, True), (1800, 2400, True), (None, 1800, False), (1800, 800, False)],
)
def test_stop_halted_needs_a_shorter_grace_period(termination: int | None, grace: int | None, fails: bool) -> None:
    plan = decide_stop(vm("Halted"), vmi("Running", termination), StopOptions(grace_period=grace))
    # Upstream patches the grace period before it checks (even when it then refuses).
    if grace is not None:
        assert plan.vmi_patch == [
            {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": termination},
            {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": grace},
        ]
    if fails:
        assert plan.error is not None and plan.status_patch is None
        conflict(plan.error, "Halted only supports manual stop requests with a shorter graceperiod")
    else:
        assert requests_of(plan) == [STOP]


@pytest.mark.parametrize("strategy", ["Always", "RerunOnFailure", "Once", "Manual"])
def test_stop_running_vm(strategy: str) -> None:
    plan = decide_stop(vm(strategy), vmi(), StopOptions())
    if strategy in ("Manual", "RerunOnFailure"):
        assert requests_of(plan) == [STOP] and plan.vm_patch is None
    else:
        assert plan.status_patch is None and plan.vm_patch is not None


def test_stop_overrides_a_pending_start() -> None:
    plan = decide_stop(vm("Manual", stateChangeRequests=[START]), vmi(), StopOptions())
    assert plan.status_patch == [
        {"op": "test", "path": "/status/stateChangeRequests", "value": [START]},
        {"op": "replace", "path": "/status/stateChangeRequests", "value": [STOP]},
    ]


# ------------------------------------------------------------------------------------------------------ start


@pytest.mark.parametrize(
    ("strategy", "phase", "message"),
    [
        ("Always", None, "Always does not support manual start requests"),
        ("Always", "Running", "VM is already running"),
        ("Once", None, "Once does not support manual start requests"),
        ("RerunOnFailure", "Failed", "RerunOnFailure does not support starting VM from failed state"),
        ("Manual", "Scheduling", "VM is already running"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_start_refused(strategy: str, phase: str | None, message: str, dry_run: bool) -> None:
    with pytest.raises(APIError) as exc:
        decide_start(vm(strategy), vmi(phase) if phase else None, body(dryRun=["All"]) if dry_run else b"")
    conflict(exc, message)


@pytest.mark.parametrize(
    ("strategy", "phase"), [("RerunOnFailure", "Succeeded"), ("Manual", "Succeeded"), ("Manual", "Failed")]
)
def test_start_after_final_vmi_restarts(strategy: str, phase: str) -> None:
    plan = decide_start(vm(strategy), vmi(phase), b"{}")
    assert requests_of(plan) == [STOP, START] and not plan.dry_run


@pytest.mark.parametrize("phase", [None, "", "Unknown"])
def test_start_manual_queues_start(phase: str | None) -> None:
    plan = decide_start(vm("Manual", printableStatus="Stopped"), vmi(phase) if phase is not None else None, b"")
    assert plan.status_patch == [
        {"op": "test", "path": "/status/stateChangeRequests", "value": None},
        {"op": "add", "path": "/status/stateChangeRequests", "value": [START]},
    ]


def test_start_refused_when_manual_recovery_required() -> None:
    broken = vm("Halted", conditions=[{"type": "ManualRecoveryRequired", "status": "True"}])
    with pytest.raises(APIError) as exc:
        decide_start(broken, None, b"")
    assert exc.value.code == 409 and "VM recovery required" in exc.value.message


@pytest.mark.parametrize("dry_run", [False, True])
def test_start_paused_halted_sends_a_start_request(dry_run: bool) -> None:
    payload = body(paused=True, dryRun=["All"]) if dry_run else body(paused=True)
    plan = decide_start(vm(running=False), vmi("Succeeded"), payload)
    assert requests_of(plan) == [{"action": "Start", "data": {"paused": "true"}}]
    assert plan.vm_patch is None and plan.dry_run is dry_run


@pytest.mark.parametrize("strategy", ["Manual", "RerunOnFailure"])
def test_start_paused_after_success(strategy: str) -> None:
    plan = decide_start(vm(strategy), vmi("Succeeded"), body(paused=True))
    assert requests_of(plan) == [STOP, {"action": "Start", "data": {"paused": "true"}}]


def test_start_halted_switches_the_run_strategy() -> None:
    assert decide_start(vm("Halted"), None, b"").vm_patch == [
        {"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
        {"op": "replace", "path": "/spec/runStrategy", "value": "Always"},
    ]
    assert decide_start(vm(running=False), None, b"").vm_patch == [
        {"op": "test", "path": "/spec/running", "value": False},
        {"op": "replace", "path": "/spec/running", "value": True},
    ]


def test_start_with_both_running_and_run_strategy_is_an_internal_error() -> None:
    with pytest.raises(APIError) as exc:
        decide_start(vm("Manual", running=True), None, b"")
    assert exc.value.code == 500
    assert exc.value.message == "Internal error occurred: running and runstrategy are mutually exclusive"


def test_start_of_wait_as_receiver_changes_nothing() -> None:
    assert decide_start(vm("WaitAsReceiver"), None, b"") == Plan()


def test_start_removes_the_start_failure() -> None:
    failed = vm("Manual", startFailure={"consecutiveFailCount": 2}, printableStatus="CrashLoopBackOff")
    assert decide_start(failed, None, b"").status_patch == [
        {"op": "test", "path": "/status/stateChangeRequests", "value": None},
        {"op": "add", "path": "/status/stateChangeRequests", "value": [START]},
        {"op": "remove", "path": "/status/startFailure"},
    ]


# ------------------------------------------------------------------------------------------------ state change JSON


def test_change_request_patches() -> None:
    stop, start = change_request("Stop", uid=UID), change_request("Start")
    created = vm("Manual", created=True)
    minimal = vm("Manual")
    for changes in ([stop], [stop, start], [start]):
        assert change_request_patch(created, *changes) == [
            {"op": "test", "path": "/status/stateChangeRequests", "value": None},
            {"op": "add", "path": "/status/stateChangeRequests", "value": changes},
        ]
        assert change_request_patch(minimal, *changes) == [
            {"op": "add", "path": "/status", "value": {"stateChangeRequests": changes}}
        ]
    # A status of zero values is no status at all (Go's semantic DeepEqual).
    assert change_request_patch(vm("Manual", created=False, stateChangeRequests=[]), start)[0]["path"] == "/status"
    pending = vm("Manual", stateChangeRequests=[start])
    assert change_request_patch(pending, stop) == [
        {"op": "test", "path": "/status/stateChangeRequests", "value": [start]},
        {"op": "replace", "path": "/status/stateChangeRequests", "value": [stop]},
    ]
    with pytest.raises(Exception, match="stop/start already underway"):
        change_request_patch(vm("Manual", stateChangeRequests=[stop]), start)
    with pytest.raises(Exception, match="stop/start already underway"):
        change_request_patch(pending, stop, start)


def test_running_patch_prefers_run_strategy() -> None:
    assert running_patch(vm("Once"), False)[1] == {"op": "replace", "path": "/spec/runStrategy", "value": "Halted"}
    assert running_patch(vm(running=True), False)[1] == {"op": "replace", "path": "/spec/running", "value": False}


# ------------------------------------------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"[1]", "json: cannot unmarshal array into Go value of type v1.StartOptions"),
        (b'{"paused": "yes"}', "json: cannot unmarshal string into Go struct field StartOptions.paused of type bool"),
    ],
)
def test_start_body_errors(payload: bytes, message: str) -> None:
    with pytest.raises(APIError) as exc:
        parse_start(payload)
    assert exc.value.code == 400
    assert exc.value.message == f"Can not unmarshal Request body to struct, error: {message}"


def test_options_decode() -> None:
    assert parse_start(b"").paused is False
    assert parse_start(b"paused: true\n").paused is True
    assert parse_stop(body(gracePeriod=0, dryRun=["All"])) == StopOptions(grace_period=0, dry_run=DRY)
    assert parse_restart(b"null") == RestartOptions()
    assert parse_pause(body(dryRun=["All"])).dry_run == DRY
    with pytest.raises(APIError, match='Unsupported value: "Some"'):
        parse_stop(body(dryRun=["Some"]))
    with pytest.raises(APIError, match=r"StopOptions\.gracePeriod of type int64"):
        parse_stop(body(gracePeriod=True))


# ------------------------------------------------------------------------------------------------ VMI subresources


def _check(error: APIError | None, code: int, message: str) -> None:
    assert error is not None and error.code == code, error
    assert message in error.message


def test_freeze_checks() -> None:
    _check(check_freeze(vmi("Scheduled")), 409, "VM is not running")
    _check(check_unfreeze(vmi("Scheduled")), 409, "VMI is not running")
    assert check_freeze(vmi()) is None and check_unfreeze(vmi()) is None


def test_pause_checks() -> None:
    _check(check_pause(vmi("Failed")), 409, "VM is not running")
    _check(check_pause(vmi("Running", None, "Paused")), 409, "VMI is already paused")
    probed = vmi(livenessProbe={"initialDelaySeconds": 120, "httpGet": {"port": 80}})
    error = check_pause(probed)
    _check(error, 403, "Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported")
    assert error is not None and error.message.startswith('virtualmachineinstance.kubevirt.io "testvm" is forbidden: ')
    assert check_pause(vmi(livenessProbe={"guestAgentPing": {}})) is None
    assert check_pause(vmi()) is None
    conflict(
        check_pause(vmi("Running", None, "Paused")) or APIError(0, "", ""),
        "VMI is already paused",
        "virtualmachineinstance",
    )


def test_unpause_checks() -> None:
    _check(check_unpause(vmi()), 409, "VMI is not paused")
    _check(check_unpause(vmi("Failed")), 409, "VMI is not running")
    assert check_unpause(vmi("Running", None, "Paused")) is None
    _check(check_unpause_vm(vm("Always", snapshotInProgress="snap")), 409, "VM snapshot is in progress")
    assert check_unpause_vm(vm("Always")) is None and check_unpause_vm(None) is None


def test_soft_reboot_checks() -> None:
    _check(check_soft_reboot(vmi("Failed", None, "AgentConnected")), 409, "VM is not running")
    _check(check_soft_reboot(vmi("Running", None, "AgentConnected", "Paused")), 409, "VMI is paused")
    no_acpi = vmi(domain={"features": {"acpi": {"enabled": False}}})
    _check(check_soft_reboot(no_acpi), 409, "VMI neither have the agent connected nor the ACPI feature enabled")
    assert check_soft_reboot(vmi("Running", None, "AgentConnected")) is None
    assert check_soft_reboot(vmi()) is None


def test_a_failed_reset_says_why_when_the_vmi_is_not_running() -> None:
    unreachable = check_handler_reachable(vmi("Pending"))
    assert unreachable is not None
    refused = reset_failure(vmi("Pending"), unreachable)
    assert (refused.code, refused.message) == (
        400,
        "Failed to reset non-running VMI with phase Pending: Unable to connect to VirtualMachineInstance because "
        "phase is Pending instead of Running or Scheduled",
    )
    handler_error = APIError(500, "InternalError", "reset failed: no domain")
    failed = reset_failure(vmi("Scheduled"), handler_error, from_handler=True)
    assert (failed.code, failed.message) == (
        500,
        "Internal error occurred: Failed to reset non-running VMI with phase Scheduled: reset failed: no domain",
    )
    assert reset_failure(vmi(), handler_error, from_handler=True).message == (
        "Internal error occurred: reset failed: no domain"
    )


def test_guest_agent_checks() -> None:
    _check(check_guest_agent(vmi("Scheduled")), 409, "VMI is not running")
    _check(check_guest_agent(vmi()), 409, "VMI does not have guest agent connected")
    assert check_guest_agent(vmi("Running", None, "AgentConnected")) is None


def test_console_and_vnc_checks() -> None:
    _check(
        check_console(vmi(domain={"devices": {"autoattachSerialConsole": False}})),
        400,
        "No serial consoles are present.",
    )
    _check(check_console(vmi("Failed")), 409, "VMI is in failed status")
    _check(check_console(vmi("Scheduled")), 400, "VMI is not running")
    assert check_console(vmi()) is None
    _check(
        check_vnc(vmi(domain={"devices": {"autoattachGraphicsDevice": False}})), 400, "No graphics devices are present."
    )
    _check(check_vnc(vmi("Pending")), 400, "VMI is not running")
    assert check_vnc(vmi()) is None


def test_handler_reachable_only_while_scheduled_or_running() -> None:
    message = "Unable to connect to VirtualMachineInstance because phase is Pending instead of Running or Scheduled"
    _check(check_handler_reachable(vmi("Pending")), 400, message)
    assert check_handler_reachable(vmi("Scheduled")) is None and check_handler_reachable(vmi()) is None
