"""Which status changes wait to be merged with the next write, and for how long (controller/status_coalescing.py)."""

from __future__ import annotations

from typing import Any

from pykubevirt.controller.status_coalescing import (
    DETAIL_SECONDS,
    OBSERVABLE_SECONDS,
    HeldWrites,
    only_details_changed,
    running_awaits_ready_sync,
    vm_stopped_awaits_vmi_removal,
    vmi_awaits_ready_sync,
)


def ready(status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message, "lastTransitionTime": "t1"}


def test_a_new_reason_or_message_on_a_condition_is_a_detail() -> None:
    before = {"printableStatus": "Starting", "conditions": [ready("False", "VMIConditionMissing")]}
    after = {"printableStatus": "Starting", "conditions": [ready("False", "GuestNotRunning", "not running")]}
    assert only_details_changed(before, after)


def test_a_condition_status_a_new_condition_or_any_other_field_is_not() -> None:
    before = {"printableStatus": "Starting", "conditions": [ready("False", "GuestNotRunning")]}
    assert not only_details_changed(before, {**before, "conditions": [ready("True", "")]})
    failure = {"type": "Failure", "status": "True"}
    assert not only_details_changed(before, {**before, "conditions": [*before["conditions"], failure]})
    assert not only_details_changed(before, {**before, "conditions": []})
    assert not only_details_changed(before, {**before, "printableStatus": "Running"})
    assert not only_details_changed(before, {**before, "created": True})


def test_bookkeeping_fields_count_as_details_when_named() -> None:
    before = {"phase": "Scheduling", "activePods": {"pod": ""}}
    after = {"phase": "Scheduling", "activePods": {"pod": "node01"}}
    assert not only_details_changed(before, after)
    assert only_details_changed(before, after, ["activePods"])
    assert not only_details_changed(before, {**after, "phase": "Scheduled"}, ["activePods"])


def test_a_running_vmi_awaits_its_ready_sync_while_its_ready_condition_predates_running() -> None:
    assert vmi_awaits_ready_sync({"status": {"phase": "Running", "conditions": [ready("False", "GuestNotRunning")]}})
    assert not vmi_awaits_ready_sync({"status": {"phase": "Running", "conditions": [ready("True", "")]}})
    # The pod's own readiness (a failing probe) is a verdict to show at once.
    assert not vmi_awaits_ready_sync({"status": {"phase": "Running", "conditions": [ready("False", "")]}})
    assert not vmi_awaits_ready_sync(
        {"status": {"phase": "Scheduled", "conditions": [ready("False", "GuestNotRunning")]}}
    )
    assert not vmi_awaits_ready_sync(None)


def test_only_a_running_status_waits_for_the_readiness_of_its_vmi() -> None:
    awaiting = {"status": {"phase": "Running", "conditions": [ready("False", "GuestNotRunning")]}}
    assert running_awaits_ready_sync({"printableStatus": "Running"}, awaiting)
    # Stopped right after the start: Stopping is shown at once, or the VMI's end overtakes it (Running → Stopped).
    for news in ("Stopping", "Terminating", "Migrating", "Paused"):
        assert not running_awaits_ready_sync({"printableStatus": news}, awaiting), news
    synced = {"status": {"phase": "Running", "conditions": [ready("True", "")]}}
    assert not running_awaits_ready_sync({"printableStatus": "Running"}, synced)


def vm(strategy: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "vm", "deletionTimestamp": "t2"} if deleting else {"name": "vm"}
    return {"metadata": meta, "spec": {"runStrategy": strategy}}


def test_a_stopped_vm_awaits_the_removal_of_its_deleted_vmi_unless_another_vmi_follows() -> None:
    deleted = {"metadata": {"deletionTimestamp": "t1"}, "status": {"phase": "Succeeded"}}
    stopped = {"printableStatus": "Stopped", "created": True}
    assert vm_stopped_awaits_vmi_removal(vm("Halted"), stopped, deleted)
    assert vm_stopped_awaits_vmi_removal(vm("Manual"), stopped, deleted)
    assert vm_stopped_awaits_vmi_removal(vm("Always", deleting=True), stopped, deleted)
    # A restart: the next VMI's Starting would replace Stopped unseen.
    assert not vm_stopped_awaits_vmi_removal(vm("Always"), stopped, deleted)
    start = {**stopped, "stateChangeRequests": [{"action": "Start"}]}
    assert not vm_stopped_awaits_vmi_removal(vm("Manual"), start, deleted)
    # A final VMI nobody deletes stays: there is nothing to wait for.
    finished = {"metadata": {}, "status": {"phase": "Succeeded"}}
    assert not vm_stopped_awaits_vmi_removal(vm("Halted"), stopped, finished)
    assert not vm_stopped_awaits_vmi_removal(vm("Halted"), {**stopped, "printableStatus": "Stopping"}, deleted)
    assert not vm_stopped_awaits_vmi_removal(vm("Halted"), stopped, None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_held_change_waits_at_most_the_window_from_when_it_was_first_held() -> None:
    clock = Clock()
    held = HeldWrites(clock=clock)
    assert held.hold("ns/vm", 1.0) == 1.0
    clock.now += 0.75
    assert held.hold("ns/vm", 1.0) == 0.25, "holding again does not restart the window"
    clock.now += 0.25
    assert held.hold("ns/vm", 1.0) is None, "due: written now"
    held.release("ns/vm")
    assert len(held) == 0
    assert held.hold("ns/vm") == DETAIL_SECONDS, "a write starts the next window afresh"
    assert held.hold("ns/other") == DETAIL_SECONDS, "keys are held independently"


def test_an_observable_change_held_after_a_detail_waits_no_longer_than_its_own_window() -> None:
    clock = Clock()
    held = HeldWrites(clock=clock)
    assert held.hold("ns/vm") == DETAIL_SECONDS
    clock.now += OBSERVABLE_SECONDS
    assert held.hold("ns/vm", OBSERVABLE_SECONDS) is None
