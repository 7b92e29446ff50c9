"""kube-scheduler's InterPodAffinity plugin, as pure functions over Pod and Node objects.

Filter: a pod's required affinity needs a matching pod in the node's topology domain (or, for the first pod of a
group that matches its own terms, none anywhere); its required anti-affinity and every placed pod's required
anti-affinity keep it out of a domain holding a matching pod. Score: the weights of preferred terms (both ways) and
placed pods' required affinity (weight 1, kube's hardPodAffinityWeight) per domain, normalized to 0-100.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pykubevirt.api.label_selectors import LabelSelector, stored_selector
from pykubevirt.api.objects import labels_of, namespace_of

Object = Mapping[str, object]
Labels = Mapping[str, str]
# Namespace name → its labels (for terms with a namespaceSelector).
NamespaceLabels = Callable[[str], Labels]

ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
HARD_POD_AFFINITY_WEIGHT = 1
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class Term:
    """One PodAffinityTerm, its namespaces resolved against the pod that carries it."""

    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    selector: LabelSelector
    topology_key: str
    weight: int = 0

    @classmethod
    def of(cls, owner: Object, raw: Mapping[str, object], weight: int = 0) -> Term:
        listed = raw.get("namespaces") or []
        namespaces = frozenset(str(n) for n in listed) if isinstance(listed, list) else frozenset()
        if not namespaces and raw.get("namespaceSelector") is None:
            namespaces = frozenset({namespace_of(owner)})
        return cls(
            namespaces,
            stored_selector(raw.get("namespaceSelector")),
            stored_selector(raw.get("labelSelector")),
            str(raw.get("topologyKey") or ""),
            weight,
        )

    def matches(self, pod: Object, namespace_labels: NamespaceLabels) -> bool:
        namespace = namespace_of(pod)
        if namespace not in self.namespaces and not (
            not self.namespace_selector.nothing and self.namespace_selector.matches(dict(namespace_labels(namespace)))
        ):
            return False
        return self.selector.matches(dict(labels_of(pod)))


@dataclass(frozen=True, slots=True)
class PodTerms:
    """A pod's affinity and anti-affinity terms, required and preferred."""

    affinity: tuple[Term, ...] = ()
    anti_affinity: tuple[Term, ...] = ()
    preferred_affinity: tuple[Term, ...] = ()
    preferred_anti_affinity: tuple[Term, ...] = ()

    @classmethod
    def of(cls, pod: Object) -> PodTerms:
        spec = pod.get("spec")
        affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
        if not isinstance(affinity, Mapping):
            return _NONE
        parts: list[tuple[Term, ...]] = []
        for kind in ("podAffinity", "podAntiAffinity"):
            rules = affinity.get(kind)
            rules = rules if isinstance(rules, Mapping) else {}
            required = rules.get(REQUIRED) or []
            preferred = rules.get(PREFERRED) or []
            parts.append(tuple(Term.of(pod, t) for t in required if isinstance(t, Mapping)))
            parts.append(
                tuple(
                    Term.of(pod, w["podAffinityTerm"], int(w.get("weight") or 0))
                    for w in preferred
                    if isinstance(w, Mapping) and isinstance(w.get("podAffinityTerm"), Mapping)
                )
            )
        terms = cls(parts[0], parts[2], parts[1], parts[3])
        return terms if terms.any else _NONE

    @property
    def any(self) -> bool:
        return bool(self.affinity or self.anti_affinity or self.preferred_affinity or self.preferred_anti_affinity)


_NONE = PodTerms()


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A pod bound (or assumed) to a node, with the node's labels and the pod's terms."""

    pod: Object
    node_labels: Labels
    terms: PodTerms


def _no_namespace_labels(namespace: str) -> Labels:
    return {}


class AffinityCheck:
    """InterPodAffinity's PreFilter state for one pod: the topology domains its terms and placed pods' terms count."""

    def __init__(
        self, pod: Object, placed: Iterable[PlacedPod], namespace_labels: NamespaceLabels = _no_namespace_labels
    ) -> None:
        self.pod = pod
        self.terms = PodTerms.of(pod)
        self.affinity_counts: dict[tuple[str, str], int] = defaultdict(int)
        self.anti_affinity_counts: dict[tuple[str, str], int] = defaultdict(int)
        self.existing_anti_affinity: dict[tuple[str, str], int] = defaultdict(int)
        self.scores: dict[tuple[str, str], int] = defaultdict(int)
        self._namespace_labels = namespace_labels
        for other in placed:
            self._count(other)

    def _count(self, other: PlacedPod) -> None:
        labels = other.node_labels

        def add(
            counts: dict[tuple[str, str], int], terms: Sequence[Term], pod: Object, amount: int = 0, sign: int = 1
        ) -> None:
            # `amount` 0: the term's own weight.
            for term in terms:
                if term.topology_key in labels and term.matches(pod, self._namespace_labels):
                    counts[(term.topology_key, labels[term.topology_key])] += sign * (amount or term.weight)

        add(self.affinity_counts, self.terms.affinity, other.pod, 1)
        add(self.anti_affinity_counts, self.terms.anti_affinity, other.pod, 1)
        add(self.existing_anti_affinity, other.terms.anti_affinity, self.pod, 1)
        # Scoring, both ways: this pod's preferences about the placed pod, and the placed pod's about this one.
        add(self.scores, self.terms.preferred_affinity, other.pod)
        add(self.scores, self.terms.preferred_anti_affinity, other.pod, sign=-1)
        add(self.scores, other.terms.preferred_affinity, self.pod)
        add(self.scores, other.terms.preferred_anti_affinity, self.pod, sign=-1)
        if labels:
            add(self.scores, other.terms.affinity, self.pod, HARD_POD_AFFINITY_WEIGHT)

    def reasons(self, node_labels: Labels) -> list[str]:
        """Why the pod may not go to a node with these labels (empty when it may), in kube's filter order."""
        if self.terms.affinity and not self._satisfies_affinity(node_labels):
            return [ERR_AFFINITY]
        for term in self.terms.anti_affinity:
            value = node_labels.get(term.topology_key)
            if value is not None and self.anti_affinity_counts.get((term.topology_key, value), 0) > 0:
                return [ERR_ANTI_AFFINITY]
        for key, value in node_labels.items():
            if self.existing_anti_affinity.get((key, value), 0) > 0:
                return [ERR_EXISTING_ANTI_AFFINITY]
        return []

    def _satisfies_affinity(self, node_labels: Labels) -> bool:
        found = True
        for term in self.terms.affinity:
            value = node_labels.get(term.topology_key)
            if value is None:
                return False  # every term's topology must exist on the node
            if self.affinity_counts.get((term.topology_key, value), 0) <= 0:
                found = False
        if found:
            return True
        # The first pod of a group with affinity to itself: nothing matches anywhere yet, and it matches its terms.
        return not any(self.affinity_counts.values()) and all(
            term.matches(self.pod, self._namespace_labels) for term in self.terms.affinity
        )

    def raw_score(self, node_labels: Labels) -> int:
        return sum(self.scores.get((key, value), 0) for key, value in node_labels.items())
