"""virt-handler's reading of a domain: the VMI phase it implies and the Paused condition (one row per case)."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api import constants as c
from pykubevirt.handler.phase import UNCHANGED, Observed, observed_domain, paused_condition, phase_for
from pykubevirt.launcher.protocol import PROTOCOL_VERSION, Status


def vmi(phase: str = c.PHASE_RUNNING, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "v", "namespace": "ns"}, "spec": {"domain": {}, **spec}, "status": {"phase": phase}}


def domain(state: str, reason: str = "Unknown") -> Observed:
    return Observed(state=state, reason=reason, defined=True)


NO_ACPI = {"domain": {"features": {"acpi": {"enabled": False}}}}


@pytest.mark.parametrize(
    ("current", "observed", "spec", "expected"),
    [
        # No domain yet: a starting or healthy launcher keeps the phase, a gone one fails a Scheduled/Running VMI.
        (c.PHASE_SCHEDULED, Observed(), {}, UNCHANGED),
        (c.PHASE_SCHEDULED, Observed(launcher_initializing=True), {}, UNCHANGED),
        (c.PHASE_RUNNING, Observed(launcher_unresponsive=True), {}, c.PHASE_FAILED),
        (c.PHASE_SCHEDULED, Observed(launcher_unresponsive=True), {}, c.PHASE_FAILED),
        (c.PHASE_SUCCEEDED, Observed(launcher_unresponsive=True), {}, UNCHANGED),
        (c.PHASE_FAILED, Observed(), {}, UNCHANGED),
        (c.PHASE_PENDING, Observed(), {}, c.PHASE_SCHEDULED),
        ("", Observed(), {}, c.PHASE_SCHEDULED),
        (c.PHASE_RUNNING, domain("NoState"), {}, UNCHANGED),
        # Stopped domains, by reason.
        (c.PHASE_RUNNING, domain("Shutoff", "Crashed"), {}, c.PHASE_FAILED),
        (c.PHASE_RUNNING, domain("Crashed", "Panicked"), {}, c.PHASE_FAILED),
        (c.PHASE_RUNNING, domain("Shutoff", "Failed"), {}, c.PHASE_FAILED),
        (c.PHASE_RUNNING, domain("Shutoff", "Shutdown"), {}, c.PHASE_SUCCEEDED),
        (c.PHASE_RUNNING, domain("Shutoff", "Saved"), {}, c.PHASE_SUCCEEDED),
        (c.PHASE_RUNNING, domain("Shutoff", "FromSnapshot"), {}, c.PHASE_SUCCEEDED),
        (c.PHASE_RUNNING, domain("Shutoff", "Migrated"), {}, UNCHANGED),
        (c.PHASE_RUNNING, domain("Shutoff", "Unknown"), {}, c.PHASE_SUCCEEDED),
        (c.PHASE_RUNNING, domain("Crashed", "Unknown"), {}, c.PHASE_FAILED),
        # Destroyed: a guest that had ACPI and a grace period ignored the power button, so it failed.
        (c.PHASE_RUNNING, domain("Shutoff", "Destroyed"), {}, c.PHASE_FAILED),
        (c.PHASE_RUNNING, domain("Shutoff", "Destroyed"), {"terminationGracePeriodSeconds": 10}, c.PHASE_FAILED),
        (c.PHASE_RUNNING, domain("Shutoff", "Destroyed"), {"terminationGracePeriodSeconds": 0}, c.PHASE_SUCCEEDED),
        (c.PHASE_RUNNING, domain("Shutoff", "Destroyed"), NO_ACPI, c.PHASE_SUCCEEDED),
        # Live domains are Running, whatever they are doing, except a failed post-copy migration.
        (c.PHASE_SCHEDULED, domain("Running", "Booted"), {}, c.PHASE_RUNNING),
        (c.PHASE_RUNNING, domain("Paused", "User"), {}, c.PHASE_RUNNING),
        (c.PHASE_RUNNING, domain("Paused", "PostcopyFailed"), {}, c.PHASE_FAILED),
        (c.PHASE_RUNNING, domain("Blocked"), {}, c.PHASE_RUNNING),
        (c.PHASE_RUNNING, domain("PMSuspended"), {}, c.PHASE_RUNNING),
        (c.PHASE_RUNNING, domain("ShuttingDown", "User"), {}, c.PHASE_RUNNING),
        (c.PHASE_RUNNING, domain("SomethingNew"), {}, UNCHANGED),
    ],
)
def test_phase_for(current: str, observed: Observed, spec: dict[str, Any], expected: str) -> None:
    assert phase_for(vmi(current, **spec), observed) == expected


@pytest.mark.parametrize(
    ("reason", "condition_reason", "message"),
    [
        ("User", "PausedByUser", "VMI was paused by user"),
        ("Migration", "PausedByMigrationMonitor", "VMI was paused by the migration monitor"),
        ("IOError", "PausedIOError", "VMI was paused, low-level IO error detected"),
        ("StartingUp", "PausedByUser", "VMI was paused by user"),
    ],
)
def test_paused_condition_by_reason(reason: str, condition_reason: str, message: str) -> None:
    assert paused_condition(domain("Paused", reason), "2026-01-01T00:00:00Z") == {
        "type": "Paused",
        "status": "True",
        "reason": condition_reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


@pytest.mark.parametrize("state", ["Running", "Shutoff", "NoState", "ShuttingDown"])
def test_no_paused_condition_unless_paused(state: str) -> None:
    assert paused_condition(domain(state, "User"), "now") is None


def test_observed_domain_reads_the_launcher_status() -> None:
    status: Status = {
        "protocolVersion": PROTOCOL_VERSION,
        "domain": {"state": "Paused", "reason": "User", "defined": True, "name": "ns_v"},
        "vmiUid": "u",
        "markedForGracefulShutdown": False,
        "emulation": True,
        "pid": 1,
    }
    assert observed_domain(status) == Observed(state="Paused", reason="User", defined=True)
