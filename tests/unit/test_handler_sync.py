"""virt-handler's sync decisions on plain data: the next action, graceful shutdown timing, status updates, heartbeat."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pykubevirt.api import constants as c
from pykubevirt.handler.heartbeat import heartbeat_patch
from pykubevirt.handler.phase import UNCHANGED, Observed
from pykubevirt.handler.shutdown import SHUTDOWN_RESEND_SECONDS, ShutdownStep, grace_period, shutdown_step
from pykubevirt.handler.status_update import status_changes, sync_failed_conditions
from pykubevirt.handler.sync_action import Action, SyncAction, domain_alive, next_action

NOW = "2026-01-01T00:00:00Z"
RUNNING = Observed(state="Running", reason="Booted", defined=True)
SHUTOFF = Observed(state="Shutoff", reason="Shutdown", defined=True)
NO_DOMAIN = Observed()


def vmi(phase: str, *, deleting: bool = False, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "v", "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {"domain": {}, **spec}, "status": {"phase": phase}}


# ------------------------------------------------------------------------------------------------ next action


@pytest.mark.parametrize(
    ("phase", "deleting", "marked", "observed", "expected"),
    [
        # A final VMI is finished whatever its domain does.
        (c.PHASE_SUCCEEDED, True, False, RUNNING, SyncAction(Action.FINISH)),
        (c.PHASE_FAILED, False, True, NO_DOMAIN, SyncAction(Action.FINISH)),
        # Shutdown wins over everything else while the guest is up.
        (c.PHASE_RUNNING, True, False, RUNNING, SyncAction(Action.SHUTDOWN)),
        (c.PHASE_RUNNING, False, True, RUNNING, SyncAction(Action.SHUTDOWN)),
        (
            c.PHASE_RUNNING,
            True,
            False,
            Observed(state="Paused", reason="User", defined=True),
            SyncAction(Action.SHUTDOWN),
        ),
        # The launcher's mark stops only a Running VMI; a Scheduled one is still started.
        (c.PHASE_SCHEDULED, False, True, NO_DOMAIN, SyncAction(Action.START)),
        # A stopped guest of a deleting VMI: report how it ended.
        (c.PHASE_RUNNING, True, False, SHUTOFF, SyncAction(Action.REPORT, c.PHASE_SUCCEEDED)),
        (c.PHASE_RUNNING, True, False, Observed(state="NoState", defined=True), SyncAction(Action.REPORT)),
        # No domain yet: start it for a Scheduled or Running VMI whose launcher answers, and nobody else.
        (c.PHASE_SCHEDULED, False, False, NO_DOMAIN, SyncAction(Action.START)),
        (c.PHASE_RUNNING, False, False, NO_DOMAIN, SyncAction(Action.START)),
        (c.PHASE_SCHEDULED, True, False, NO_DOMAIN, SyncAction(Action.REPORT)),
        (c.PHASE_SCHEDULED, False, False, Observed(launcher_initializing=True), SyncAction(Action.REPORT)),
        (
            c.PHASE_RUNNING,
            False,
            False,
            Observed(launcher_unresponsive=True),
            SyncAction(Action.REPORT, c.PHASE_FAILED),
        ),
        (c.PHASE_PENDING, False, False, NO_DOMAIN, SyncAction(Action.REPORT, c.PHASE_SCHEDULED)),
        # A domain that runs is reported.
        (c.PHASE_SCHEDULED, False, False, RUNNING, SyncAction(Action.REPORT, c.PHASE_RUNNING)),
        (c.PHASE_RUNNING, False, False, RUNNING, SyncAction(Action.REPORT, c.PHASE_RUNNING)),
        (c.PHASE_RUNNING, False, False, SHUTOFF, SyncAction(Action.REPORT, c.PHASE_SUCCEEDED)),
    ],
)
def test_next_action(phase: str, deleting: bool, marked: bool, observed: Observed, expected: SyncAction) -> None:
    assert next_action(vmi(phase, deleting=deleting), observed, marked_for_graceful_shutdown=marked) == expected


@pytest.mark.parametrize(
    ("observed", "alive"),
    [
        (RUNNING, True),
        (Observed(state="Paused", defined=True), True),
        (Observed(state="ShuttingDown", defined=True), True),
        (SHUTOFF, False),
        (Observed(state="Crashed", defined=True), False),
        (Observed(state="NoState", defined=True), False),
        (Observed(state="Running", defined=False), False),
    ],
)
def test_domain_alive(observed: Observed, alive: bool) -> None:
    assert domain_alive(observed) is alive


# ------------------------------------------------------------------------------------------------ graceful shutdown


@pytest.mark.parametrize(
    ("grace", "elapsed", "expected"),
    [
        (0, 0.0, ShutdownStep(kill=True, requeue_after=0.5)),
        (30, 0.0, ShutdownStep(kill=False, requeue_after=SHUTDOWN_RESEND_SECONDS)),
        (30, 27.0, ShutdownStep(kill=False, requeue_after=3.0)),
        (30, 29.9, ShutdownStep(kill=False, requeue_after=0.5)),
        (30, 30.0, ShutdownStep(kill=True, requeue_after=0.5)),
        # A handler restarted long after the shutdown began (its record kept the start) kills at once.
        (30, 3600.0, ShutdownStep(kill=True, requeue_after=0.5)),
        (2, 0.0, ShutdownStep(kill=False, requeue_after=2.0)),
    ],
)
def test_shutdown_step(grace: int, elapsed: float, expected: ShutdownStep) -> None:
    assert shutdown_step(grace, 1000.0, 1000.0 + elapsed) == expected


@pytest.mark.parametrize("grace", [1, 5, 12, 30, 31])
def test_acpi_is_resent_at_most_every_five_seconds_and_the_kill_comes_when_grace_is_over(grace: int) -> None:
    """Follow the requeues from the first request: ACPI until the grace period is over, then exactly one kill."""
    started = now = 500.0
    sent: list[float] = []
    while not (step := shutdown_step(grace, started, now)).kill:
        sent.append(now - started)
        assert step.requeue_after <= SHUTDOWN_RESEND_SECONDS
        now += step.requeue_after
    killed_at = now - started
    assert sent[0] == 0.0
    assert len(sent) >= math.ceil(grace / SHUTDOWN_RESEND_SECONDS)
    assert grace <= killed_at < grace + 0.5


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, c.DEFAULT_GRACE_PERIOD_SECONDS),
        ({"terminationGracePeriodSeconds": 0}, 0),
        ({"terminationGracePeriodSeconds": 45}, 45),
    ],
)
def test_grace_period(spec: dict[str, Any], expected: int) -> None:
    assert grace_period(vmi(c.PHASE_RUNNING, **spec)) == expected


# ------------------------------------------------------------------------------------------------ status updates

PAUSED_BY_USER = Observed(state="Paused", reason="User", defined=True)
READY = {"type": "Ready", "status": "True"}


def test_a_new_phase_is_written_with_its_transition_time() -> None:
    current = {
        "phase": c.PHASE_SCHEDULED,
        "phaseTransitionTimestamps": [{"phase": "Scheduled", "phaseTransitionTimestamp": "t0"}],
    }
    changes = status_changes(current, RUNNING, None, c.PHASE_RUNNING, NOW)
    assert changes == {
        "phase": c.PHASE_RUNNING,
        "phaseTransitionTimestamps": [
            {"phase": "Scheduled", "phaseTransitionTimestamp": "t0"},
            {"phase": "Running", "phaseTransitionTimestamp": NOW},
        ],
    }


@pytest.mark.parametrize("new_phase", [UNCHANGED, c.PHASE_RUNNING])
def test_nothing_to_write_when_the_status_says_it_all(new_phase: str) -> None:
    interfaces = [{"name": "default", "ipAddress": "10.0.2.15"}]
    current = {"phase": c.PHASE_RUNNING, "conditions": [READY], "interfaces": interfaces}
    assert status_changes(current, RUNNING, interfaces, new_phase, NOW) == {}
    assert status_changes(current, RUNNING, None, new_phase, NOW) == {}


def test_interfaces_are_written_when_they_change() -> None:
    interfaces = [{"name": "default", "ipAddress": "10.0.2.15"}]
    assert status_changes({"phase": c.PHASE_RUNNING}, RUNNING, interfaces, UNCHANGED, NOW) == {"interfaces": interfaces}


def test_a_paused_domain_adds_the_paused_condition_next_to_the_others() -> None:
    changes = status_changes({"phase": c.PHASE_RUNNING, "conditions": [READY]}, PAUSED_BY_USER, None, UNCHANGED, NOW)
    assert [x["type"] for x in changes["conditions"]] == ["Ready", "Paused"]
    assert changes["conditions"][1]["reason"] == "PausedByUser"
    assert changes["conditions"][1]["lastTransitionTime"] == NOW


def test_the_same_pause_keeps_its_condition_and_transition_time() -> None:
    earlier = {"type": "Paused", "status": "True", "reason": "PausedByUser", "lastTransitionTime": "t0"}
    current = {"phase": c.PHASE_RUNNING, "conditions": [READY, earlier]}
    assert status_changes(current, PAUSED_BY_USER, None, UNCHANGED, NOW) == {}


def test_another_pause_reason_replaces_the_condition() -> None:
    earlier = {"type": "Paused", "status": "True", "reason": "PausedByUser", "lastTransitionTime": "t0"}
    io_error = Observed(state="Paused", reason="IOError", defined=True)
    changes = status_changes({"phase": c.PHASE_RUNNING, "conditions": [earlier]}, io_error, None, UNCHANGED, NOW)
    assert [(x["reason"], x["lastTransitionTime"]) for x in changes["conditions"]] == [("PausedIOError", NOW)]


def test_a_running_domain_drops_the_paused_and_synchronized_conditions() -> None:
    paused = {"type": "Paused", "status": "True", "reason": "PausedByUser"}
    unsynchronized = {"type": "Synchronized", "status": "False", "reason": "x"}
    current = {"phase": c.PHASE_RUNNING, "conditions": [paused, READY, unsynchronized]}
    assert status_changes(current, RUNNING, None, UNCHANGED, NOW) == {"conditions": [READY]}


def test_sync_failed_conditions_replace_the_synchronized_condition() -> None:
    old = {"type": "Synchronized", "status": "False", "message": "old"}
    conditions = sync_failed_conditions({"conditions": [old, READY]}, "the disk is missing", NOW)
    assert conditions == [
        READY,
        {
            "type": "Synchronized",
            "status": "False",
            "reason": "Synchronizing with the Domain failed.",
            "message": "the disk is missing",
            "lastTransitionTime": NOW,
        },
    ]


# ------------------------------------------------------------------------------------------------ heartbeat


def test_heartbeat_patch_stamps_the_node_schedulable_with_the_handler_annotations() -> None:
    address = {c.HANDLER_ADDRESS_ANNOTATION: "127.0.0.1:8186"}
    assert heartbeat_patch(NOW, address) == {
        "metadata": {
            "annotations": {c.HEARTBEAT_ANNOTATION: NOW, c.HANDLER_ADDRESS_ANNOTATION: "127.0.0.1:8186"},
            "labels": {c.NODE_SCHEDULABLE_LABEL: "true"},
        }
    }
    assert heartbeat_patch(NOW)["metadata"]["annotations"] == {c.HEARTBEAT_ANNOTATION: NOW}
