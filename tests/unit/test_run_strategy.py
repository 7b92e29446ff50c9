"""Run strategy resolution, state change requests and isSetToStart, as KubeVirt's VM controller reads them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pykubevirt.api.objects import condition, condition_true, is_final, vmi_phase
from pykubevirt.api.timestamps import format_time, parse_time
from pykubevirt.api.vm_run_strategy import RunStrategyError, run_strategy
from pykubevirt.controller.run_strategy import (
    Act,
    Action,
    decide,
    has_start_paused_request,
    has_start_request,
    has_stop_request_for_vmi,
    is_set_to_start,
    should_start_rerun_on_failure,
)


def make_vm(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vm", "namespace": "default"}, "spec": spec or {}, "status": status}


def make_vmi(
    phase: str = "Running", uid: str = "vmi-uid", conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"metadata": {"name": "vm", "uid": uid}, "status": {"phase": phase, "conditions": conditions or []}}


START = {"action": "Start"}


def stop(uid: str | None) -> dict[str, Any]:
    return {"action": "Stop", "uid": uid} if uid is not None else {"action": "Stop"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"running": True}, "Always"),
        ({"running": False}, "Halted"),
        ({}, "Halted"),
        ({"running": None, "runStrategy": None}, "Halted"),
        ({"runStrategy": "Manual"}, "Manual"),
        ({"runStrategy": "RerunOnFailure"}, "RerunOnFailure"),
        ({"runStrategy": "Once"}, "Once"),
        ({"runStrategy": "WaitAsReceiver"}, "WaitAsReceiver"),
        ({"runStrategy": "Always"}, "Always"),
    ],
)
def test_run_strategy(spec: dict[str, Any], expected: str) -> None:
    assert run_strategy(make_vm(spec)) == expected


@pytest.mark.parametrize("running", [True, False])
def test_running_and_run_strategy_are_mutually_exclusive(running: bool) -> None:
    with pytest.raises(RunStrategyError) as raised:
        run_strategy(make_vm({"running": running, "runStrategy": "Always"}))
    assert str(raised.value) == "running and runstrategy are mutually exclusive"


def test_start_request_reads_only_the_first_request() -> None:
    assert has_start_request(make_vm(stateChangeRequests=[START]))
    assert not has_start_request(make_vm(stateChangeRequests=[stop("u"), START]))
    assert not has_start_request(make_vm())
    assert not has_start_request(make_vm(stateChangeRequests=[]))


def test_start_paused_request() -> None:
    paused = {"action": "Start", "data": {"paused": "true"}}
    assert has_start_paused_request(make_vm(stateChangeRequests=[paused]))
    assert not has_start_paused_request(make_vm(stateChangeRequests=[START]))
    assert not has_start_paused_request(make_vm(stateChangeRequests=[{"action": "Start", "data": {"paused": "false"}}]))
    assert not has_start_paused_request(make_vm(stateChangeRequests=[{"action": "Stop", "data": {"paused": "true"}}]))
    assert not has_start_paused_request(make_vm(stateChangeRequests=[START, paused]))


def test_stop_request_must_name_the_vmi() -> None:
    vmi = make_vmi(uid="abc")
    assert has_stop_request_for_vmi(make_vm(stateChangeRequests=[stop("abc")]), vmi)
    assert not has_stop_request_for_vmi(make_vm(stateChangeRequests=[stop("other")]), vmi)
    assert not has_stop_request_for_vmi(make_vm(stateChangeRequests=[stop(None)]), vmi)
    assert not has_stop_request_for_vmi(make_vm(stateChangeRequests=[START, stop("abc")]), vmi)
    assert not has_stop_request_for_vmi(make_vm(), vmi)


# vm_test.go "shouldStartRerunOnFailure should".
@pytest.mark.parametrize(
    ("requests", "status_strategy", "expected"),
    [
        ([], None, True),  # never started
        ([], "RerunOnFailure", False),  # stopped, status matches spec
        ([START], "RerunOnFailure", True),  # start request after a VMI failure
        ([], "Always", True),  # switched from Always
        ([], "Halted", True),  # switched from Halted
        ([START], "Always", True),
    ],
)
def test_should_start_rerun_on_failure(
    requests: list[dict[str, Any]], status_strategy: str | None, expected: bool
) -> None:
    vm = make_vm({"runStrategy": "RerunOnFailure"}, stateChangeRequests=requests)
    if status_strategy is not None:
        vm["status"]["runStrategy"] = status_strategy
    assert should_start_rerun_on_failure(vm, "RerunOnFailure") is expected


@pytest.mark.parametrize(
    ("strategy", "requests", "vmi", "status_strategy", "expected"),
    [
        ("Always", [], None, None, True),
        ("Always", [], make_vmi("Failed"), None, True),
        ("Halted", [START], None, None, False),
        ("Halted", [], make_vmi(), None, False),
        ("Manual", [], None, None, False),
        ("Manual", [START], None, None, True),
        ("Manual", [], make_vmi(uid="u"), None, True),
        ("Manual", [stop("u")], make_vmi(uid="u"), None, False),
        ("Manual", [stop("other")], make_vmi(uid="u"), None, True),
        ("RerunOnFailure", [], make_vmi("Failed"), None, True),
        ("RerunOnFailure", [], make_vmi("Running"), None, True),
        ("RerunOnFailure", [], make_vmi("Succeeded"), None, False),
        ("RerunOnFailure", [], None, "RerunOnFailure", False),
        ("RerunOnFailure", [START], None, "RerunOnFailure", True),
        ("RerunOnFailure", [], None, None, True),
        ("Once", [], None, None, True),
        ("Once", [], make_vmi("Running"), None, False),
        ("Once", [], make_vmi("Failed"), None, False),
        ("WaitAsReceiver", [], None, None, False),
        ("Bogus", [], None, None, False),
        (None, [START], None, None, False),
    ],
)
def test_is_set_to_start(
    strategy: str | None,
    requests: list[dict[str, Any]],
    vmi: dict[str, Any] | None,
    status_strategy: str | None,
    expected: bool,
) -> None:
    vm = make_vm({"runStrategy": strategy}, stateChangeRequests=requests)
    if status_strategy is not None:
        vm["status"]["runStrategy"] = status_strategy
    assert is_set_to_start(vm, vmi, strategy) is expected


@pytest.mark.parametrize(
    ("phase", "final"),
    [("", False), ("Pending", False), ("Scheduling", False), ("Scheduled", False), ("Running", False),
     ("WaitingForSync", False), ("Unknown", False), ("Succeeded", True), ("Failed", True)],
)  # fmt: skip
def test_is_final(phase: str, final: bool) -> None:
    assert is_final(make_vmi(phase)) is final


def test_is_final_and_phase_without_vmi_or_status() -> None:
    assert not is_final(None)
    assert vmi_phase(None) == ""
    assert vmi_phase({"metadata": {}}) == ""


def test_condition_helpers() -> None:
    vmi = make_vmi(conditions=[{"type": "Ready", "status": "True"}, {"type": "Paused", "status": "False"}])
    assert condition(vmi, "Ready") == {"type": "Ready", "status": "True"}
    assert condition(vmi, "Missing") is None
    assert condition(None, "Ready") is None
    assert condition_true(vmi, "Ready")
    assert not condition_true(vmi, "Paused")
    assert not condition_true(vmi, "Missing")


def test_time_helpers() -> None:
    assert parse_time("2024-05-01T10:00:00Z") == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert parse_time("2024-05-01T12:00:00.5+02:00") == datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=UTC)
    assert parse_time(None) is None
    assert parse_time("yesterday") is None
    assert format_time(datetime(2024, 5, 1, 10, 0, 0, 999999, tzinfo=UTC)) == "2024-05-01T10:00:00Z"


# ------------------------------------------------------------------------------------------------ syncRunStrategy
# One row per line of pkg/virt-controller/watch/vm/vm.go: syncRunStrategy (WaitAsReceiver as kubevirt-semantics §1.3).

RUNNING = make_vmi("Running", uid="u")
FAILED = make_vmi("Failed", uid="u")
SUCCEEDED = make_vmi("Succeeded", uid="u")
STOP_U = stop("u")


def terminating(vmi: dict[str, Any]) -> dict[str, Any]:
    return {**vmi, "metadata": {**vmi["metadata"], "deletionTimestamp": "2024-05-01T10:00:00Z"}}


def receiver(vmi: dict[str, Any], *, is_target: bool, completed: bool = False) -> dict[str, Any]:
    annotations = {"kubevirt.io/create-migration-target": "true"} if is_target else {}
    status = {**vmi["status"], "migrationState": {"completed": True}} if completed else vmi["status"]
    return {**vmi, "metadata": {**vmi["metadata"], "annotations": annotations}, "status": status}


WAIT_42 = Action(Act.WAIT_FOR_BACKOFF, wait_seconds=42.0)
NOTHING = Action(Act.NOTHING)
START_ = Action(Act.START)
STOP_ = Action(Act.STOP)


@pytest.mark.parametrize(
    ("strategy", "requests", "status_strategy", "vmi", "backoff", "expected"),
    [
        # Always: a VMI always runs; a final one is deleted (and recreated next loop), a stop request restarts.
        ("Always", [], None, None, 0.0, START_),
        ("Always", [], None, None, 42.0, WAIT_42),
        ("Always", [], None, RUNNING, 0.0, NOTHING),
        ("Always", [STOP_U], None, RUNNING, 0.0, STOP_),
        ("Always", [stop("other")], None, RUNNING, 0.0, NOTHING),
        ("Always", [], None, FAILED, 0.0, STOP_),
        ("Always", [], None, SUCCEEDED, 42.0, STOP_),
        ("Always", [], None, terminating(FAILED), 0.0, NOTHING),  # stopVMI: already terminating
        # RerunOnFailure: only a failure is rerun; without a VMI, start on request or right after a switch.
        ("RerunOnFailure", [], "RerunOnFailure", None, 0.0, NOTHING),
        ("RerunOnFailure", [START], "RerunOnFailure", None, 0.0, START_),
        ("RerunOnFailure", [START], "RerunOnFailure", None, 42.0, WAIT_42),
        ("RerunOnFailure", [], "Always", None, 0.0, START_),
        ("RerunOnFailure", [], None, None, 42.0, WAIT_42),
        ("RerunOnFailure", [], None, RUNNING, 0.0, NOTHING),
        ("RerunOnFailure", [STOP_U], None, RUNNING, 0.0, STOP_),
        ("RerunOnFailure", [], None, FAILED, 0.0, Action(Act.STOP_THEN_REQUEST_START)),
        ("RerunOnFailure", [STOP_U], None, FAILED, 0.0, Action(Act.STOP_THEN_REQUEST_START)),
        ("RerunOnFailure", [], None, SUCCEEDED, 0.0, STOP_),
        ("RerunOnFailure", [], None, terminating(FAILED), 0.0, NOTHING),
        ("RerunOnFailure", [STOP_U], None, terminating(RUNNING), 0.0, NOTHING),
        # Manual: only requests act, without backoff; a final VMI is kept.
        ("Manual", [], None, None, 0.0, NOTHING),
        ("Manual", [START], None, None, 42.0, START_),
        ("Manual", [], None, RUNNING, 0.0, NOTHING),
        ("Manual", [STOP_U], None, RUNNING, 0.0, STOP_),
        ("Manual", [stop("other")], None, RUNNING, 0.0, NOTHING),
        ("Manual", [], None, FAILED, 0.0, NOTHING),
        ("Manual", [STOP_U], None, terminating(RUNNING), 0.0, NOTHING),
        # Halted: no VMI runs; a Start request (start paused) switches the spec to Always.
        ("Halted", [], None, None, 0.0, NOTHING),
        ("Halted", [START], None, None, 0.0, Action(Act.SWITCH_HALTED_TO_ALWAYS)),
        ("Halted", [], None, RUNNING, 0.0, STOP_),
        ("Halted", [], None, SUCCEEDED, 0.0, STOP_),
        ("Halted", [], None, terminating(RUNNING), 0.0, NOTHING),
        # Once: start once, without backoff; a final VMI stays and stop requests are ignored.
        ("Once", [], None, None, 42.0, START_),
        ("Once", [], None, RUNNING, 0.0, NOTHING),
        ("Once", [], None, FAILED, 0.0, NOTHING),
        ("Once", [STOP_U], None, RUNNING, 0.0, NOTHING),
        # WaitAsReceiver: start a receiver; a VMI that is no receiver is an error until its migration completed.
        ("WaitAsReceiver", [], None, None, 42.0, START_),
        ("WaitAsReceiver", [], None, receiver(RUNNING, is_target=True), 0.0, NOTHING),
        ("WaitAsReceiver", [], None, receiver(RUNNING, is_target=False, completed=True), 0.0, NOTHING),
        (
            "WaitAsReceiver",
            [],
            None,
            receiver(RUNNING, is_target=False),
            0.0,
            Action(Act.ERROR, message="Found non receiver VMI while VM is receiver", reason="FailedCreate"),
        ),
        # Any other value.
        ("Bogus", [], None, None, 0.0, Action(Act.ERROR, message="unknown runstrategy: Bogus", reason="FailedCreate")),
    ],
)
def test_decide(
    strategy: str,
    requests: list[dict[str, Any]],
    status_strategy: str | None,
    vmi: dict[str, Any] | None,
    backoff: float,
    expected: Action,
) -> None:
    vm = make_vm({"runStrategy": strategy}, stateChangeRequests=requests)
    if status_strategy is not None:
        vm["status"]["runStrategy"] = status_strategy
    assert decide(vm, vmi, strategy, backoff_left=backoff) == expected
