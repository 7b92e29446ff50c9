"""What the pods bound to each node take from it, kept current one pod event at a time (kube-scheduler's cache).

Summing a node's pods at every decision made scheduling n pods onto one node cost O(n²); here a decision reads one
running total a node, and a pod event moves only that pod's share.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pykubevirt.node.scheduling_predicates import Amounts, NodeInfo, Object, PodUsage

Port = tuple[str, str, int]


def _shift(total: Amounts, amounts: Amounts, sign: int) -> None:
    for name, value in amounts.items():
        total[name] = total.get(name, 0) + sign * value


@dataclass(slots=True)
class _Totals:
    requested: Amounts = field(default_factory=dict)
    non_zero: Amounts = field(default_factory=dict)
    pods: int = 0
    ports: Counter[Port] = field(default_factory=Counter)

    def shift(self, usage: PodUsage, sign: int) -> None:
        _shift(self.requested, usage.requests, sign)
        _shift(self.non_zero, usage.non_zero, sign)
        self.pods += sign
        for port in usage.ports:
            self.ports[port] += sign
            if self.ports[port] <= 0:
                del self.ports[port]


class NodeUsage:
    """Pod key → (node, usage) for every bound pod; usage None for a finished pod, which takes nothing."""

    def __init__(self) -> None:
        self._placed: dict[str, tuple[str, PodUsage | None]] = {}
        self._totals: dict[str, _Totals] = {}

    def place(self, key: str, node: str | None, usage: PodUsage | None) -> None:
        """The pod's current state: bound to `node` (None: unbound or deleted), taking `usage` (None: finished)."""
        previous = self._placed.pop(key, None)
        if previous is not None and previous[1] is not None:
            totals = self._totals[previous[0]]
            totals.shift(previous[1], -1)
            if totals.pods == 0:
                del self._totals[previous[0]]
        if not node:
            return
        self._placed[key] = (node, usage)
        if usage is not None:
            self._totals.setdefault(node, _Totals()).shift(usage, 1)

    def placed_keys(self) -> list[str]:
        """The keys of every pod bound to a node."""
        return list(self._placed)

    def node_of(self, key: str) -> str | None:
        placed = self._placed.get(key)
        return placed[0] if placed is not None else None

    def info(self, node: Object) -> NodeInfo:
        """A NodeInfo for the Node object with its bound, unfinished pods already counted."""
        info = NodeInfo(node)
        totals = self._totals.get(info.name)
        if totals is not None:
            info.requested = dict(totals.requested)
            info.non_zero_requested = dict(totals.non_zero)
            info.pod_count = totals.pods
            info.used_ports = set(totals.ports)
        return info
