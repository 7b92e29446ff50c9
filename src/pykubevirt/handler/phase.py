"""What virt-handler concludes from a domain: the VMI phase and the Paused condition. Pure.

Upstream: pkg/virt-handler/vm.go: calculateVmPhaseForStatusReason, calculatePausedCondition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.launcher.protocol import (
    ALIVE_STATES,
    CRASHED,
    NO_STATE,
    PAUSED,
    STOPPED_STATES,
    UNKNOWN_REASON,
    Status,
)

PAUSED_REASONS = {
    "User": ("PausedByUser", "VMI was paused by user"),
    "Migration": ("PausedByMigrationMonitor", "VMI was paused by the migration monitor"),
    "IOError": ("PausedIOError", "VMI was paused, low-level IO error detected"),
}
UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class Observed:
    """The domain as the launcher reports it, plus what the handler knows about the launcher."""

    state: str = NO_STATE
    reason: str = UNKNOWN_REASON
    defined: bool = False
    launcher_initializing: bool = False
    launcher_unresponsive: bool = False
    # The launcher is gone after reporting its domain stopped; the state is the last one it reported.
    launcher_exited: bool = False


def observed_domain(status: Status) -> Observed:
    """What the handler's decisions need of a launcher's status."""
    domain = status["domain"]
    return Observed(state=domain["state"], reason=domain["reason"], defined=domain["defined"])


def phase_for(vmi: dict[str, Any], domain: Observed) -> str:
    """The VMI phase the domain implies, or UNCHANGED (KubeVirt's calculateVmPhaseForStatusReason)."""
    current = (vmi.get("status") or {}).get("phase") or ""
    if not domain.defined or domain.state == NO_STATE:
        if current in (c.PHASE_SCHEDULED, c.PHASE_RUNNING):
            # A launcher still starting keeps the phase; one that is gone fails the VMI; a healthy one will
            # (re)create the domain on the next sync.
            return c.PHASE_FAILED if domain.launcher_unresponsive else UNCHANGED
        if current in c.FINAL_PHASES:
            return UNCHANGED
        return c.PHASE_SCHEDULED
    if domain.state in STOPPED_STATES:
        if domain.reason in ("Crashed", "Panicked", "Failed"):
            return c.PHASE_FAILED
        if domain.reason == "Destroyed":
            return c.PHASE_FAILED if _killed_after_grace(vmi) else c.PHASE_SUCCEEDED
        if domain.reason in ("Shutdown", "Saved", "FromSnapshot"):
            return c.PHASE_SUCCEEDED
        if domain.reason == "Migrated":
            return UNCHANGED
        return c.PHASE_FAILED if domain.state == CRASHED else c.PHASE_SUCCEEDED
    if domain.state == PAUSED and domain.reason == "PostcopyFailed":
        return c.PHASE_FAILED
    if domain.state in ALIVE_STATES:
        return c.PHASE_RUNNING
    return UNCHANGED


def _killed_after_grace(vmi: dict[str, Any]) -> bool:
    """A destroyed domain failed when it had ACPI and a grace period (it ignored the shutdown request)."""
    spec = vmi.get("spec") or {}
    acpi = ((spec.get("domain") or {}).get("features") or {}).get("acpi", {"enabled": True})
    grace = spec.get("terminationGracePeriodSeconds")
    has_acpi = acpi is not None and acpi.get("enabled", True) is not False
    return has_acpi and (grace is None or int(grace) != 0)


def paused_condition(domain: Observed, now: str) -> dict[str, Any] | None:
    """The Paused condition for a paused domain (None when it is not paused)."""
    if domain.state != PAUSED:
        return None
    reason, message = PAUSED_REASONS.get(domain.reason, ("PausedByUser", "VMI was paused by user"))
    return {
        "type": "Paused",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
