"""Coalescing of status writes: a change nobody watches waits to ride along with the next change somebody does.

A VM start passes through many reconcile steps, and most of them only touch a condition's reason or message (the
VMI's Ready goes VMIConditionMissing → GuestNotRunning) or the controller's bookkeeping (a launcher pod's node in
activePods). Writing each costs an API write and an event to every watcher. Such a change is held back for at most
DETAIL_SECONDS: the next observable change (a phase, a printableStatus, a condition's status) writes it too, and
if none comes the held change is written when the window ends, so nothing is lost, only merged. An observable change
that is about to be followed by another one (running_awaits_ready_sync, vm_stopped_awaits_vmi_removal) waits at most
OBSERVABLE_SECONDS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.vm_run_strategy import run_strategy_or_none
from pykubevirt.controller.printable_status import STATUS_RUNNING, STATUS_STOPPED
from pykubevirt.controller.vmi_status import GUEST_NOT_RUNNING, READY

# Long enough to span a start's steps on a busy machine (at 1 s a loaded node's slower steps still cost a write each).
DETAIL_SECONDS = 5.0
# What a user waits for may come this much later, merged with what follows it.
OBSERVABLE_SECONDS = 1.0

Status = Mapping[str, Any]


def condition_states(status: Status) -> list[tuple[str, str]]:
    """(type, status) of each condition: what `kubectl get` columns and waits on a condition see."""
    return sorted((str(c.get("type")), str(c.get("status"))) for c in status.get("conditions") or [])


def only_details_changed(old: Status, new: Status, bookkeeping: Iterable[str] = ()) -> bool:
    """True when `new` differs from `old` only in conditions' reasons, messages and times, or `bookkeeping` fields."""
    skipped = {"conditions", *bookkeeping}
    for key in set(old) | set(new):
        if key not in skipped and old.get(key) != new.get(key):
            return False
    return condition_states(old) == condition_states(new)


def vmi_awaits_ready_sync(vmi: Mapping[str, Any] | None) -> bool:
    """The VMI just turned Running and virt-controller has not yet copied its pod's readiness onto it.

    Its Ready condition still carries the verdict from before (GuestNotRunning); the VMI controller's next step
    replaces it, so the VM's Running and its readiness can be written together.
    """
    status = (vmi or {}).get("status") or {}
    ready: Mapping[str, Any] = next((x for x in status.get("conditions") or [] if x.get("type") == READY), {})
    return status.get("phase") == c.PHASE_RUNNING and ready.get("reason") == GUEST_NOT_RUNNING


def running_awaits_ready_sync(status: Status, vmi: Mapping[str, Any] | None) -> bool:
    """The VM's new status says Running, and its VMI's readiness is about to follow (vmi_awaits_ready_sync).

    Only Running waits for it: any other status (Stopping after a stop right after the start, Terminating,
    Migrating) is news of its own, and held it could be overtaken and never shown (Running → Stopped).
    """
    return status.get("printableStatus") == STATUS_RUNNING and vmi_awaits_ready_sync(vmi)


def vm_stopped_awaits_vmi_removal(vm: Mapping[str, Any], status: Status, vmi: Mapping[str, Any] | None) -> bool:
    """The VM's new status says Stopped while its final VMI is being deleted, and no new VMI will follow.

    The VMI is gone a moment later (its finalizers go once its pod has), and the VM's created: false and Ready
    VMINotExists follow: Stopped waits for them, one write instead of two. Not for a restart (Always, or a Start
    request queued): the next VMI's Starting would replace a held Stopped before anyone saw it.
    """
    if vmi is None or not vmi["metadata"].get("deletionTimestamp") or status.get("printableStatus") != STATUS_STOPPED:
        return False
    if vm["metadata"].get("deletionTimestamp"):
        return True
    strategy = run_strategy_or_none(vm)
    start_requested = any(r.get("action") == "Start" for r in status.get("stateChangeRequests") or [])
    return strategy == c.RUN_STRATEGY_HALTED or (strategy == c.RUN_STRATEGY_MANUAL and not start_requested)


class HeldWrites:
    """Per key, since when a status change has been held back."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._since: dict[str, float] = {}

    def hold(self, key: str, window: float = DETAIL_SECONDS) -> float | None:
        """Seconds the key's change may still wait, counted from when it was first held; None: write it now."""
        now = self.clock()
        remaining = window - (now - self._since.setdefault(key, now))
        return remaining if remaining > 0 else None

    def release(self, key: str) -> None:
        """The key's status was written, or there is nothing left to write: start afresh."""
        self._since.pop(key, None)

    def __len__(self) -> int:
        return len(self._since)
