"""kube-scheduler's PodTopologySpread: its filter and score over plain pods and node labels."""

from __future__ import annotations

from typing import Any

from pykubevirt.node.topology_spread import (
    ERR_CONSTRAINTS,
    ERR_MISSING_LABEL,
    NodeView,
    SpreadCheck,
    constraints_of,
)

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def nodes(*specs: tuple[str, str], allowed: tuple[str, ...] = (), tainted: tuple[str, ...] = ()) -> list[NodeView]:
    """Nodes by (name, zone); `allowed` limits which the pod's node affinity allows (all when empty)."""
    return [
        NodeView(name, {HOST: name, ZONE: zone}, not allowed or name in allowed, name not in tainted)
        for name, zone in specs
    ]


def constraint(key: str = ZONE, skew: int = 1, when: str = "DoNotSchedule", **extra: Any) -> dict[str, Any]:
    selector = {"matchLabels": {"app": "web"}}
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when, "labelSelector": selector, **extra}


def pod(name: str, *constraints: dict[str, Any], namespace: str = "team", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if constraints:
        spec["topologySpreadConstraints"] = list(constraints)
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "web"}}, "spec": spec}


CLUSTER = nodes(("a1", "a"), ("a2", "a"), ("b1", "b"))


def test_do_not_schedule_keeps_zones_within_max_skew() -> None:
    placed = [(pod("w1"), "a1"), (pod("w2"), "a2")]
    check = SpreadCheck(pod("w3", constraint()), CLUSTER, placed)
    # Zone a has 2, zone b 0: one more in a would make the skew 3 - 0 > 1.
    assert {n.name: check.reasons(n.labels) for n in CLUSTER} == {
        "a1": [ERR_CONSTRAINTS],
        "a2": [ERR_CONSTRAINTS],
        "b1": [],
    }
    # maxSkew 3 allows it.
    assert SpreadCheck(pod("w3", constraint(skew=3)), CLUSTER, placed).reasons(CLUSTER[0].labels) == []


def test_only_the_pods_namespace_selected_and_live_pods_count() -> None:
    other = pod("x", app="db")
    elsewhere = pod("y", namespace="other")
    leaving = pod("z")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    check = SpreadCheck(pod("w", constraint()), CLUSTER, [(other, "a1"), (elsewhere, "a1"), (leaving, "a2")])
    assert [check.reasons(n.labels) for n in CLUSTER] == [[], [], []]


def test_a_node_without_the_key_is_refused_and_not_counted() -> None:
    bare = NodeView("bare", {HOST: "bare"}, True, True)
    check = SpreadCheck(pod("w", constraint()), [*CLUSTER, bare], [(pod("w1"), "bare")])
    assert check.reasons(bare.labels) == [ERR_MISSING_LABEL]
    assert check.counts[0] == {"a": 0, "b": 0}


def test_node_affinity_narrows_the_domains_unless_ignored_and_min_domains_counts_missing_ones() -> None:
    only_a = nodes(("a1", "a"), ("a2", "a"), ("b1", "b"), allowed=("a1", "a2"))
    placed = [(pod("w1"), "a1")]
    # Zone b is not among the pod's nodes: zone a alone is the minimum, so another pod there is fine.
    assert SpreadCheck(pod("w2", constraint()), only_a, placed).reasons(only_a[1].labels) == []
    ignoring = constraint(nodeAffinityPolicy="Ignore")
    assert SpreadCheck(pod("w2", ignoring), only_a, placed).reasons(only_a[1].labels) == [ERR_CONSTRAINTS]
    # Two domains asked for where one counts: the minimum is taken as 0.
    wanting = constraint(minDomains=2)
    assert SpreadCheck(pod("w2", wanting), only_a, placed).reasons(only_a[1].labels) == [ERR_CONSTRAINTS]
    tainted = nodes(("a1", "a"), ("b1", "b"), tainted=("b1",))
    honoring = constraint(nodeTaintsPolicy="Honor")
    assert SpreadCheck(pod("w2", honoring), tainted, placed).reasons(tainted[0].labels) == []
    assert SpreadCheck(pod("w2", constraint()), tainted, placed).reasons(tainted[0].labels) == [ERR_CONSTRAINTS]


def test_match_label_keys_narrow_the_selector_to_the_pods_values() -> None:
    keyed = pod("w", constraint(matchLabelKeys=["version"]), app="web", version="2")
    (only,) = constraints_of(keyed)
    assert only.selector.matches({"app": "web", "version": "2"})
    assert not only.selector.matches({"app": "web", "version": "1"})
    old = pod("old", app="web", version="1")
    check = SpreadCheck(keyed, CLUSTER, [(old, "a1"), (old, "a2")])
    assert check.reasons(CLUSTER[0].labels) == []


def test_schedule_anyway_scores_emptier_domains_higher() -> None:
    soft = constraint(HOST, when="ScheduleAnyway")
    placed = [(pod("w1"), "a1"), (pod("w2"), "a1"), (pod("w3"), "a2")]
    check = SpreadCheck(pod("w4", soft), CLUSTER, placed)
    assert check.reasons(CLUSTER[0].labels) == []
    # Counts 2, 1, 0 times log(3 + 2), rounded: 3, 2, 0; kube's NormalizeScore: 100 × (3 + 0 - s) / 3.
    assert check.scores({n.name: n.labels for n in CLUSTER}) == {"a1": 0, "a2": 33, "b1": 100}
    assert SpreadCheck(pod("w4", constraint()), CLUSTER, placed).scores({"a1": CLUSTER[0].labels}) == {"a1": 0}
