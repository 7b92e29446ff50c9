"""The scheduler's running per-node totals agree with summing each node's pods, whatever order pods come and go in."""

from __future__ import annotations

import random
from typing import Any

from pykubevirt.node.node_usage import NodeUsage
from pykubevirt.node.scheduling_predicates import NodeInfo, PodUsage, is_terminal

NODES = ["node-a", "node-b"]


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}


def pod(index: int, node_name: str | None, phase: str, port: int | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "resources": {"requests": {"cpu": f"{100 + index}m", "memory": "64Mi"}}}
    if port is not None:
        container["ports"] = [{"containerPort": 80, "hostPort": port}]
    spec: dict[str, Any] = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": f"p{index}", "uid": f"u{index}"}, "spec": spec, "status": {"phase": phase}}


def summed(n: dict[str, Any], pods: dict[str, dict[str, Any]]) -> NodeInfo:
    info = NodeInfo(n)
    for p in pods.values():
        if p["spec"].get("nodeName") == info.name and not is_terminal(p):
            info.add(PodUsage.of(p))
    return info


def place(usage: NodeUsage, key: str, p: dict[str, Any] | None) -> None:
    bound = (p or {}).get("spec", {}).get("nodeName")
    usage.place(key, bound, None if p is None or not bound or is_terminal(p) else PodUsage.of(p))


def test_running_totals_match_a_fresh_sum_after_every_event() -> None:
    rng = random.Random(7)
    usage = NodeUsage()
    pods: dict[str, dict[str, Any]] = {}
    for _ in range(600):
        index = rng.randrange(40)
        key = f"default/p{index}"
        if key in pods and rng.random() < 0.3:
            del pods[key]
            place(usage, key, None)
        else:
            phase = rng.choice(["Pending", "Running", "Running", "Succeeded", "Failed"])
            port = rng.choice([None, None, 8080, 9090])
            pods[key] = pod(index, rng.choice([None, *NODES]), phase, port)
            place(usage, key, pods[key])
        for name in NODES:
            expected, got = summed(node(name), pods), usage.info(node(name))
            assert (got.requested, got.non_zero_requested) == (expected.requested, expected.non_zero_requested)
            assert (got.pod_count, got.used_ports) == (expected.pod_count, expected.used_ports)


def test_a_node_with_no_pods_has_nothing_requested_and_knows_which_node_holds_a_pod() -> None:
    usage = NodeUsage()
    p = pod(1, "node-a", "Running", 8080)
    place(usage, "default/p1", p)
    assert usage.node_of("default/p1") == "node-a"
    empty = usage.info(node("node-b"))
    assert (empty.requested, empty.pod_count, empty.used_ports) == ({}, 0, set())
    assert usage.info(node("node-a")).used_ports == {("0.0.0.0", "TCP", 8080)}
    place(usage, "default/p1", None)
    assert usage.node_of("default/p1") is None
    assert usage.info(node("node-a")).pod_count == 0
