"""kube-scheduler's InterPodAffinity: its filters and scores over plain pods and node labels."""

from __future__ import annotations

from typing import Any

from pykubevirt.node.node_scores import min_max_normalized
from pykubevirt.node.pod_affinity import (
    ERR_AFFINITY,
    ERR_ANTI_AFFINITY,
    ERR_EXISTING_ANTI_AFFINITY,
    AffinityCheck,
    PlacedPod,
    PodTerms,
)

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NODES = {
    "a": {HOST: "a", ZONE: "east"},
    "b": {HOST: "b", ZONE: "east"},
    "c": {HOST: "c", ZONE: "west"},
}


def term(key: str = HOST, **match: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": match}, "topologyKey": key}


def pod(name: str, namespace: str = "team", labels: dict[str, str] | None = None, **affinity: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


def placed(p: dict[str, Any], node: str) -> PlacedPod:
    return PlacedPod(p, NODES[node], PodTerms.of(p))


def reasons(check: AffinityCheck) -> dict[str, list[str]]:
    return {name: check.reasons(labels) for name, labels in NODES.items()}


def test_required_anti_affinity_keeps_a_vm_off_a_host_that_runs_its_pair() -> None:
    web = pod("web-2", labels={"app": "web"}, podAntiAffinity={"requiredDuringSchedulingIgnoredDuringExecution": [
        term(app="web")
    ]})  # fmt: skip
    check = AffinityCheck(web, [placed(pod("web-1", labels={"app": "web"}), "a")])
    assert reasons(check) == {"a": [ERR_ANTI_AFFINITY], "b": [], "c": []}
    # By zone: the whole east zone is taken.
    zoned = pod("web-2", labels={"app": "web"}, podAntiAffinity={"requiredDuringSchedulingIgnoredDuringExecution": [
        term(ZONE, app="web")
    ]})  # fmt: skip
    check = AffinityCheck(zoned, [placed(pod("web-1", labels={"app": "web"}), "a")])
    assert reasons(check) == {"a": [ERR_ANTI_AFFINITY], "b": [ERR_ANTI_AFFINITY], "c": []}


def test_a_placed_pods_anti_affinity_keeps_a_matching_pod_away_though_it_has_none() -> None:
    loner = pod("db", labels={"app": "db"}, podAntiAffinity={"requiredDuringSchedulingIgnoredDuringExecution": [
        term(app="web")
    ]})  # fmt: skip
    check = AffinityCheck(pod("web", labels={"app": "web"}), [placed(loner, "b")])
    assert reasons(check) == {"a": [], "b": [ERR_EXISTING_ANTI_AFFINITY], "c": []}
    # A pod the term does not select, or one of another namespace, may go there.
    assert AffinityCheck(pod("api", labels={"app": "api"}), [placed(loner, "b")]).reasons(NODES["b"]) == []
    elsewhere = pod("web", namespace="other", labels={"app": "web"})
    assert AffinityCheck(elsewhere, [placed(loner, "b")]).reasons(NODES["b"]) == []


def test_required_affinity_follows_its_pod_and_the_first_of_a_group_goes_anywhere() -> None:
    follower = pod("cache", labels={"app": "cache"}, podAffinity={"requiredDuringSchedulingIgnoredDuringExecution": [
        term(ZONE, app="web")
    ]})  # fmt: skip
    check = AffinityCheck(follower, [placed(pod("web", labels={"app": "web"}), "c")])
    assert reasons(check) == {"a": [ERR_AFFINITY], "b": [ERR_AFFINITY], "c": []}
    # Nothing to follow and not matching its own term: nowhere.
    assert set(map(tuple, reasons(AffinityCheck(follower, [])).values())) == {(ERR_AFFINITY,)}
    # A group with affinity to itself: its first pod goes anywhere, the next ones follow it.
    group = {"requiredDuringSchedulingIgnoredDuringExecution": [term(app="web")]}
    first = pod("web-1", labels={"app": "web"}, podAffinity=group)
    assert reasons(AffinityCheck(first, [])) == {"a": [], "b": [], "c": []}
    second = pod("web-2", labels={"app": "web"}, podAffinity=group)
    assert reasons(AffinityCheck(second, [placed(first, "b")])) == {"a": [ERR_AFFINITY], "b": [], "c": [ERR_AFFINITY]}
    # A node without the term's topology label never satisfies it.
    assert AffinityCheck(second, [placed(first, "b")]).reasons({"other": "x"}) == [ERR_AFFINITY]


def test_namespaces_and_namespace_selectors_choose_whose_pods_count() -> None:
    web = pod("web", namespace="shop", labels={"app": "web"})
    listed = {"requiredDuringSchedulingIgnoredDuringExecution": [{**term(app="web"), "namespaces": ["shop"]}]}
    assert AffinityCheck(pod("x", podAntiAffinity=listed), [placed(web, "a")]).reasons(NODES["a"]) == [
        ERR_ANTI_AFFINITY
    ]
    own_namespace_only = {"requiredDuringSchedulingIgnoredDuringExecution": [term(app="web")]}
    assert AffinityCheck(pod("x", podAntiAffinity=own_namespace_only), [placed(web, "a")]).reasons(NODES["a"]) == []
    selected = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {**term(app="web"), "namespaceSelector": {"matchLabels": {"tier": "prod"}}}
    ]}  # fmt: skip
    labels = {"shop": {"tier": "prod"}}
    check = AffinityCheck(pod("x", podAntiAffinity=selected), [placed(web, "a")], lambda ns: labels.get(ns, {}))
    assert check.reasons(NODES["a"]) == [ERR_ANTI_AFFINITY]
    everywhere = {"requiredDuringSchedulingIgnoredDuringExecution": [{**term(app="web"), "namespaceSelector": {}}]}
    assert AffinityCheck(pod("x", podAntiAffinity=everywhere), [placed(web, "a")]).reasons(NODES["a"]) == [
        ERR_ANTI_AFFINITY
    ]


def test_preferred_terms_score_both_ways_and_normalize_to_0_100() -> None:
    near = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 80, "podAffinityTerm": term(ZONE, app="db")}
    ]}  # fmt: skip
    away = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": term(app="web")}
    ]}  # fmt: skip
    web = pod("web-2", labels={"app": "web"}, podAffinity=near, podAntiAffinity=away)
    others = [placed(pod("db", labels={"app": "db"}), "c"), placed(pod("web-1", labels={"app": "web"}), "a")]
    check = AffinityCheck(web, others)
    raw = {name: check.raw_score(labels) for name, labels in NODES.items()}
    assert raw == {"a": -50, "b": 0, "c": 80}
    assert min_max_normalized(raw) == {"a": 0, "b": 38, "c": 100}
    # A placed pod's preference about this one counts too, and its required affinity weighs 1.
    likes_web = pod("lb", podAffinity={
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": term(app="web")}],
        "requiredDuringSchedulingIgnoredDuringExecution": [term(ZONE, app="web")],
    })  # fmt: skip
    check = AffinityCheck(pod("web", labels={"app": "web"}), [placed(likes_web, "b")])
    assert {name: check.raw_score(labels) for name, labels in NODES.items()} == {"a": 1, "b": 11, "c": 0}
    assert min_max_normalized({"a": 3, "b": 3}) == {"a": 0, "b": 0}


def test_a_pod_without_terms_has_none() -> None:
    assert not PodTerms.of(pod("plain")).any
    assert not PodTerms.of(pod("node-only", nodeAffinity={})).any
