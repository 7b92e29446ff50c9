"""When virt-handler presses the ACPI button again and when it destroys the domain. Pure.

KubeVirt's `pkg/virt-handler/vm.go: processVmShutdown`: the grace period counts from the first shutdown request (kept
across handler restarts in `NodeRecords`); until it is over the request is re-sent every ≤5 s, then the domain is
destroyed. A grace period of 0 destroys at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import objects

SHUTDOWN_RESEND_SECONDS = 5.0
# How soon to look again after a destroy or at the very end of the grace period.
RECHECK_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class ShutdownStep:
    kill: bool
    """Destroy the domain now (otherwise: send the ACPI shutdown)."""
    requeue_after: float


def grace_period(vmi: dict[str, Any]) -> int:
    """The VMI's terminationGracePeriodSeconds, KubeVirt's default when unset."""
    grace = objects.grace_period_seconds(vmi)
    return c.DEFAULT_GRACE_PERIOD_SECONDS if grace is None else grace


def shutdown_step(grace: int, started: float, now: float) -> ShutdownStep:
    """The step at `now` of a shutdown first requested at `started`."""
    elapsed = now - started
    if grace == 0 or elapsed >= grace:
        return ShutdownStep(kill=True, requeue_after=RECHECK_SECONDS)
    return ShutdownStep(kill=False, requeue_after=min(SHUTDOWN_RESEND_SECONDS, max(RECHECK_SECONDS, grace - elapsed)))
