"""What one virt-handler sync does with a VMI and its domain, by KubeVirt's priorities. Pure.

KubeVirt's `pkg/virt-handler/vm.go: defaultExecute`: shut down (deleted or terminating VMI, or a launcher told to
stop) > finish (final VMI: undefine the domain) > update (start the domain, report its state).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import objects
from pykubevirt.handler.phase import UNCHANGED, Observed, phase_for
from pykubevirt.launcher.protocol import NO_STATE, STOPPED_STATES


class Action(StrEnum):
    FINISH = "finish"
    """The VMI is final: undefine the domain (the launcher then exits) and forget the VMI."""
    SHUTDOWN = "shutdown"
    """The guest runs but must stop: ACPI, then destroy after the grace period."""
    START = "start"
    """No domain yet for a Scheduled or Running VMI: ask the launcher to define and start it."""
    REPORT = "report"
    """Report what the domain shows (`phase`, UNCHANGED when it implies none)."""


@dataclass(frozen=True, slots=True)
class SyncAction:
    action: Action
    phase: str = UNCHANGED


def domain_alive(observed: Observed) -> bool:
    """A defined domain that has not stopped (and so a guest that may still need shutting down)."""
    return observed.defined and observed.state not in STOPPED_STATES and observed.state != NO_STATE


def next_action(vmi: dict[str, Any], observed: Observed, *, marked_for_graceful_shutdown: bool) -> SyncAction:
    """The step for `vmi` given its domain; `marked_for_graceful_shutdown` is the launcher's (its pod is going)."""
    phase = objects.vmi_phase(vmi)
    if phase in c.FINAL_PHASES:
        return SyncAction(Action.FINISH)
    deleting = bool(objects.metadata(vmi).get("deletionTimestamp"))
    stopping = deleting or (marked_for_graceful_shutdown and phase == c.PHASE_RUNNING)
    if stopping and domain_alive(observed):
        return SyncAction(Action.SHUTDOWN)
    new_phase = phase_for(vmi, observed)
    if (
        not stopping
        and not observed.defined
        and not observed.launcher_unresponsive
        and not observed.launcher_initializing
        and phase in (c.PHASE_SCHEDULED, c.PHASE_RUNNING)
        and new_phase in (UNCHANGED, phase)
    ):
        return SyncAction(Action.START, new_phase)
    return SyncAction(Action.REPORT, new_phase)
