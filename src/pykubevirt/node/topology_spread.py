"""kube-scheduler's PodTopologySpread plugin, as pure functions over Pod and Node objects.

A pod's `topologySpreadConstraints` count its namespace's pods that match each constraint's selector per topology
domain (the values of the constraint's node label, over the nodes its node affinity allows). `DoNotSchedule` filters
out a node where placing the pod would make that domain exceed the least-loaded one by more than `maxSkew`;
`ScheduleAnyway` scores emptier domains higher, weighted by log(domains + 2) as kube weighs them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pykubevirt.api.label_selectors import IN, LabelSelector, Requirement, stored_selector
from pykubevirt.api.objects import is_marked_for_deletion, labels_of, namespace_of
from pykubevirt.node.node_scores import MAX_NODE_SCORE

Object = Mapping[str, object]
Labels = Mapping[str, str]

ERR_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
ERR_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"


@dataclass(frozen=True, slots=True)
class Constraint:
    """One TopologySpreadConstraint, its matchLabelKeys merged into its selector with the pod's values."""

    max_skew: int
    topology_key: str
    hard: bool
    selector: LabelSelector
    min_domains: int
    honor_node_affinity: bool
    honor_taints: bool


def constraints_of(pod: Object) -> tuple[Constraint, ...]:
    """The pod's constraints, each with its matchLabelKeys turned into `key in (the pod's value)` requirements."""
    spec = pod.get("spec")
    raw = spec.get("topologySpreadConstraints") if isinstance(spec, Mapping) else None
    if not isinstance(raw, list):
        return ()
    labels = labels_of(pod)
    found = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        selector = stored_selector(item.get("labelSelector"))
        keys = [str(k) for k in item.get("matchLabelKeys") or [] if str(k) in labels]
        if keys and not selector.nothing:
            extra = tuple(Requirement(key, IN, frozenset({str(labels[key])})) for key in keys)
            selector = LabelSelector(tuple(sorted((*selector.requirements, *extra), key=lambda r: r.key)))
        found.append(
            Constraint(
                max_skew=int(item.get("maxSkew") or 1),
                topology_key=str(item.get("topologyKey") or ""),
                hard=item.get("whenUnsatisfiable") != SCHEDULE_ANYWAY,
                selector=selector,
                min_domains=int(item.get("minDomains") or 1),
                honor_node_affinity=(item.get("nodeAffinityPolicy") or HONOR) == HONOR,
                honor_taints=item.get("nodeTaintsPolicy") == HONOR,
            )
        )
    return tuple(found)


@dataclass(frozen=True, slots=True)
class NodeView:
    """What spreading needs of a node: its labels, and whether the pod's node affinity and taint rules allow it."""

    name: str
    labels: Labels
    affinity_allows: bool
    taints_allow: bool


class SpreadCheck:
    """PodTopologySpread's PreFilter and PreScore state for one pod over the cluster's nodes and placed pods."""

    def __init__(self, pod: Object, nodes: Sequence[NodeView], placed: Iterable[tuple[Object, str]]) -> None:
        self.pod = pod
        self.constraints = constraints_of(pod)
        namespace = namespace_of(pod)
        own = labels_of(pod)
        self.self_match = [1 if c.selector.matches(dict(own)) else 0 for c in self.constraints]
        by_name = {node.name: node for node in nodes}
        # Per constraint: matching pods per domain value, over the nodes that count for it.
        self.counts: list[dict[str, int]] = [defaultdict(int) for _ in self.constraints]
        for index, constraint in enumerate(self.constraints):
            for node in nodes:
                if self._counts_for(constraint, node):
                    self.counts[index].setdefault(node.labels[constraint.topology_key], 0)
        for other, node_name in placed:
            on = by_name.get(node_name)
            if on is None or is_marked_for_deletion(other) or namespace_of(other) != namespace:
                continue
            labels = dict(labels_of(other))
            for index, constraint in enumerate(self.constraints):
                if self._counts_for(constraint, on) and constraint.selector.matches(labels):
                    self.counts[index][on.labels[constraint.topology_key]] += 1

    def _counts_for(self, constraint: Constraint, node: NodeView) -> bool:
        if any(c.topology_key not in node.labels for c in self.constraints if c.hard == constraint.hard):
            return False  # kube counts a node only when it has every key of the pod's constraints of that kind
        if constraint.honor_node_affinity and not node.affinity_allows:
            return False
        return not constraint.honor_taints or node.taints_allow

    def reasons(self, node_labels: Labels) -> list[str]:
        """Why the pod may not go to a node with these labels (empty when it may)."""
        hard = [(i, c) for i, c in enumerate(self.constraints) if c.hard]
        if any(c.topology_key not in node_labels for _, c in hard):
            return [ERR_MISSING_LABEL]
        for index, constraint in hard:
            counts = self.counts[index]
            lowest = min(counts.values(), default=0)
            if len(counts) < constraint.min_domains:
                lowest = 0  # fewer domains than asked for: the missing ones count as empty
            skew = counts.get(node_labels[constraint.topology_key], 0) + self.self_match[index] - lowest
            if skew > constraint.max_skew:
                return [ERR_CONSTRAINTS]
        return []

    def scores(self, candidates: Mapping[str, Labels]) -> dict[str, int]:
        """The soft constraints' normalized scores (0-100, emptier domains higher) for the feasible nodes."""
        soft = [(i, c) for i, c in enumerate(self.constraints) if not c.hard]
        if not soft:
            return dict.fromkeys(candidates, 0)
        scored = {name: labels for name, labels in candidates.items() if all(c.topology_key in labels for _, c in soft)}
        # kube weighs a constraint by the number of its domains among the nodes being scored.
        weights = {i: math.log(len({labels[c.topology_key] for labels in scored.values()}) + 2) for i, c in soft}
        raw: dict[str, float] = {}
        for name, labels in scored.items():
            total = 0.0
            for index, constraint in soft:
                count = self.counts[index].get(labels[constraint.topology_key], 0)
                total += count * weights[index] + constraint.max_skew - 1
            raw[name] = float(round(total))
        return _reversed(raw, candidates)


def _reversed(raw: Mapping[str, float], candidates: Iterable[str]) -> dict[str, int]:
    """PodTopologySpread's NormalizeScore: the fewest matching pods scores 100; unscored nodes 0."""
    scores = dict.fromkeys(candidates, 0)
    if not raw:
        return scores
    low, high = min(raw.values()), max(raw.values())
    for name, value in raw.items():
        scores[name] = MAX_NODE_SCORE if high == 0 else int(MAX_NODE_SCORE * (high + low - value) / high)
    return scores
