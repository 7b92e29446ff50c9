"""The VMI status fields virt-handler writes after a sync: phase, its transition times, Paused and Synchronized
conditions, interfaces. Pure: the reconciler patches what these return.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.handler.phase import UNCHANGED, Observed, paused_condition

# The conditions virt-handler owns; a sync rewrites them and leaves the others alone.
HANDLER_CONDITIONS = ("Paused", "Synchronized")
SYNC_FAILED_REASON = "Synchronizing with the Domain failed."


def status_changes(
    current: dict[str, Any], observed: Observed, interfaces: list[dict[str, Any]] | None, new_phase: str, now: str
) -> dict[str, Any]:
    """The status fields to change, from the VMI's `current` status; empty when it already says it all."""
    changes: dict[str, Any] = {}
    phase = current.get("phase") or ""
    if new_phase not in (UNCHANGED, phase):
        changes["phase"] = new_phase
        changes["phaseTransitionTimestamps"] = [
            *(current.get("phaseTransitionTimestamps") or []),
            {"phase": new_phase, "phaseTransitionTimestamp": now},
        ]
    conditions = [x for x in current.get("conditions") or [] if x.get("type") not in HANDLER_CONDITIONS]
    paused = paused_condition(observed, now)
    existing_paused = next((x for x in current.get("conditions") or [] if x.get("type") == "Paused"), None)
    if paused is not None:
        # The same pause keeps its condition (and transition time); another reason replaces it.
        conditions.append(
            existing_paused if existing_paused and existing_paused.get("reason") == paused["reason"] else paused
        )
    if conditions != (current.get("conditions") or []):
        changes["conditions"] = conditions
    if interfaces is not None and interfaces != current.get("interfaces"):
        changes["interfaces"] = interfaces
    return changes


def sync_failed_conditions(current: dict[str, Any], message: str, now: str) -> list[dict[str, Any]]:
    """The VMI's conditions with Synchronized=False saying why the domain could not be synchronized."""
    conditions = [x for x in current.get("conditions") or [] if x.get("type") != "Synchronized"]
    conditions.append(
        {
            "type": "Synchronized",
            "status": "False",
            "reason": SYNC_FAILED_REASON,
            "message": message,
            "lastTransitionTime": now,
        }
    )
    return conditions
