"""The kubelet's static CPU manager, for this node agent: a Guaranteed pod's container with a whole number of CPUs
gets that many host CPUs of its own (its process and every child are pinned to them); reserved CPUs are never given.

Assignments live in memory; an agent restarted while pinned pods run forgets them (the kubelet keeps a state file).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from pykubevirt.api.pod_qos import qos_class
from pykubevirt.api.quantity import Quantity, QuantityError

# The label virt-handler puts on a node whose kubelet runs the static CPU manager (dedicatedCpuPlacement needs it).
CPU_MANAGER_LABEL = "kubevirt.io/cpumanager"
POLICIES = ("none", "static")


class CPUAllocationError(ValueError):
    """The container wants more exclusive CPUs than are free (the kubelet's admission would have refused the pod)."""


def parse_cpu_list(text: str) -> frozenset[int]:
    """A cpuset list such as `0,2-3`."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)


def exclusive_cpu_count(pod: Mapping[str, Any], container: Mapping[str, Any]) -> int:
    """The whole CPUs a container gets to itself: only in a Guaranteed pod, only for an integer request."""
    if qos_class(pod.get("spec") or {}) != "Guaranteed":
        return 0
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu")
    try:
        amount = Quantity.parse(value).value if value is not None else Fraction(0)
    except QuantityError:
        return 0
    return int(amount) if amount.denominator == 1 else 0


class StaticCPUManager:
    """Hands out exclusive CPUs from the node's CPUs minus the reserved ones."""

    def __init__(self, reserved: frozenset[int], cpus: frozenset[int] | None = None) -> None:
        self.cpus = frozenset(os.sched_getaffinity(0)) if cpus is None else cpus
        self.reserved = reserved & self.cpus
        self._assigned: dict[tuple[str, str], frozenset[int]] = {}
        self._lock = threading.Lock()

    def free(self) -> frozenset[int]:
        taken = frozenset().union(*self._assigned.values()) if self._assigned else frozenset()
        return self.cpus - self.reserved - taken

    def allocate(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> frozenset[int] | None:
        """The container's exclusive CPUs (the same ones again for a restart); None when it gets none."""
        count = exclusive_cpu_count(pod, container)
        if count == 0:
            return None
        key = (str(pod["metadata"].get("uid")), str(container.get("name")))
        with self._lock:
            if key in self._assigned:
                return self._assigned[key]
            free = sorted(self.free())
            if len(free) < count:
                raise CPUAllocationError(f"not enough free CPUs for {count} exclusive: {len(free)} left")
            chosen = frozenset(free[:count])
            self._assigned[key] = chosen
            return chosen

    def release(self, pod_uid: str) -> None:
        with self._lock:
            for key in [k for k in self._assigned if k[0] == pod_uid]:
                del self._assigned[key]
