"""The VMI conditions that ask for a CPU or memory hotplug: HotVCPUChange and HotMemoryChange. Pure.

Upstream: pkg/virt-controller/watch/vmi/lifecycle.go (requireCPUHotplug, requireMemoryHotplug, syncHotplugCondition).
The VM controller copies new sockets or guest memory onto a running VMI; while the VMI's spec asks for more than
its status reports (`currentCPUTopology`, `memory.guestRequested`) it carries the condition, the workload updater
migrates it, and the target's virt-handler removes the condition once the hotplug is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.json_lookup import get, parse_quantity
from pykubevirt.api.objects import condition
from pykubevirt.controller.compute_resources import topology_vcpus

HOT_VCPU_CHANGE = "HotVCPUChange"
HOT_MEMORY_CHANGE = "HotMemoryChange"


def require_cpu_hotplug(vmi: Mapping[str, Any]) -> bool:
    """The spec's vCPUs differ from those the guest runs with (only for a VMI started with maxSockets)."""
    cpu = get(vmi, "spec", "domain", "cpu")
    current = (vmi.get("status") or {}).get("currentCPUTopology")
    if not isinstance(cpu, dict) or not isinstance(current, dict) or not cpu.get("maxSockets"):
        return False
    return topology_vcpus(cpu) != topology_vcpus(current)


def require_memory_hotplug(vmi: Mapping[str, Any]) -> bool:
    """The spec's guest memory differs from what was last requested of the guest (only with maxGuest)."""
    memory = get(vmi, "spec", "domain", "memory")
    status = (vmi.get("status") or {}).get("memory")
    if not isinstance(memory, dict) or not isinstance(status, dict) or memory.get("maxGuest") is None:
        return False
    guest = parse_quantity(memory.get("guest"))
    return guest is not None and guest != parse_quantity(status.get("guestRequested"))


def sync_hotplug_conditions(vmi: dict[str, Any]) -> None:
    """Add HotVCPUChange / HotMemoryChange (status True) when a hotplug is due and the condition is absent."""
    for kind, required in (
        (HOT_VCPU_CHANGE, require_cpu_hotplug(vmi)),
        (HOT_MEMORY_CHANGE, require_memory_hotplug(vmi)),
    ):
        if required and condition(vmi, kind) is None:
            vmi.setdefault("status", {}).setdefault("conditions", []).append(
                {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": None}
            )
