"""The target's part of a CPU or memory hotplug: once the migrated domain runs here, plug what the VMI asks for.

Upstream: pkg/virt-handler/migration-target.go (hotplugCPU, hotplugMemory in finalizeMigration). A VMI marked
HotVCPUChange gets its vCPUs enabled and `status.currentCPUTopology` set to its topology; one marked HotMemoryChange
gets its virtio-mem device resized and `status.memory.guestRequested` set, or HotMemoryChange=False when that
fails. Either condition is removed once served; the status changes go out with the migration's take-over patch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.api.json_lookup import get, parse_quantity
from pykubevirt.api.objects import condition
from pykubevirt.api.quantity import Quantity, QuantityFormat
from pykubevirt.handler.launcher_client import CommandFailed, LauncherClient, LauncherUnavailable
from pykubevirt.launcher.protocol import Command

log = logging.getLogger("pykubevirt.handler.hotplug")

HOT_VCPU_CHANGE = "HotVCPUChange"
HOT_MEMORY_CHANGE = "HotMemoryChange"
MEMORY_HOTPLUG_FAILED = "MemoryHotplugFailed"


@dataclass(slots=True)
class HotplugOutcome:
    """What the take-over patch adds to the VMI's status, and the warnings to record."""

    status: dict[str, Any] = field(default_factory=dict)
    warnings: list[tuple[str, str]] = field(default_factory=list)


def _without(conditions: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [x for x in conditions if x.get("type") != kind]


async def finalize_hotplug(vmi: dict[str, Any], launcher: LauncherClient) -> HotplugOutcome:
    """Serve the VMI's hotplug conditions through the target launcher; the status to patch comes back."""
    outcome = HotplugOutcome()
    conditions = list((vmi.get("status") or {}).get("conditions") or [])
    spec_domain = get(vmi, "spec", "domain") or {}
    if condition(vmi, HOT_VCPU_CHANGE) is not None:
        # Removed whether or not the vCPUs could be plugged, as upstream does: the condition asked for one attempt.
        conditions = _without(conditions, HOT_VCPU_CHANGE)
        try:
            await launcher.request(Command.SYNC_VCPUS, vmi=vmi)
        except (CommandFailed, LauncherUnavailable) as exc:
            outcome.warnings.append((str(exc), "failed to change vCPUs"))
        else:
            cpu = spec_domain.get("cpu") or {}
            outcome.status["currentCPUTopology"] = {k: cpu[k] for k in ("cores", "sockets", "threads") if cpu.get(k)}
    if condition(vmi, HOT_MEMORY_CHANGE) is not None:
        conditions = _without(conditions, HOT_MEMORY_CHANGE)
        try:
            await launcher.request(Command.SYNC_MEMORY, vmi=vmi)
        except (CommandFailed, LauncherUnavailable) as exc:
            outcome.warnings.append((str(exc), "failed to update guest memory"))
            conditions.append(
                {
                    "type": HOT_MEMORY_CHANGE,
                    "status": "False",
                    "reason": MEMORY_HOTPLUG_FAILED,
                    "message": "memory hotplug failed, the VM configuration is not supported",
                    "lastProbeTime": None,
                    "lastTransitionTime": None,
                }
            )
        else:
            guest = get(spec_domain, "memory", "guest")
            # guestCurrent follows as the guest's driver plugs the blocks (memory_changes, from the launcher).
            outcome.status["memory"] = {**((vmi.get("status") or {}).get("memory") or {}), "guestRequested": guest}
    if conditions != ((vmi.get("status") or {}).get("conditions") or []):
        outcome.status["conditions"] = conditions
    if outcome.status:
        log.info("hotplug after migration: %s", sorted(outcome.status))
    return outcome


def memory_changes(vmi: dict[str, Any], launcher_status: Mapping[str, Any] | None) -> dict[str, Any]:
    """status.memory with guestCurrent from the domain's current memory (updateMemoryInfo), for a VMI with maxGuest."""
    current = (launcher_status or {}).get("currentMemory")
    memory = (vmi.get("status") or {}).get("memory")
    if (
        not isinstance(current, int)
        or not isinstance(memory, dict)
        or get(vmi, "spec", "domain", "memory", "maxGuest") is None
    ):
        return {}
    shown = str(Quantity(current, QuantityFormat.BINARY_SI))
    if parse_quantity(memory.get("guestCurrent")) == Quantity(current):
        return {}
    return {"memory": {**memory, "guestCurrent": shown}}
