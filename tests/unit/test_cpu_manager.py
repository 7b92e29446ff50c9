"""The node agent's static CPU manager: which containers get exclusive CPUs, and which CPUs."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.node.cpu_manager import CPUAllocationError, StaticCPUManager, exclusive_cpu_count, parse_cpu_list


def pod(uid: str, cpu: str, memory: str = "1Gi", limits: bool = True) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = {"cpu": cpu, "memory": memory}
    return {"metadata": {"uid": uid}, "spec": {"containers": [{"name": "compute", "resources": resources}]}}


def compute(p: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = p["spec"]["containers"][0]
    return container


def test_cpu_lists() -> None:
    assert parse_cpu_list("0,2-4, 7") == {0, 2, 3, 4, 7}
    assert parse_cpu_list("") == frozenset()


def test_only_whole_cpus_of_guaranteed_pods_are_exclusive() -> None:
    for case, count in ((pod("a", "2"), 2), (pod("b", "1500m"), 0), (pod("c", "1", limits=False), 0)):
        assert exclusive_cpu_count(case, compute(case)) == count


def test_allocation_skips_reserved_cpus_repeats_for_a_restart_and_frees_with_the_pod() -> None:
    manager = StaticCPUManager(reserved=frozenset({0}), cpus=frozenset({0, 1, 2, 3}))
    first = pod("first", "2")
    assert manager.allocate(first, compute(first)) == {1, 2}
    assert manager.allocate(first, compute(first)) == {1, 2}
    second = pod("second", "2")
    with pytest.raises(CPUAllocationError, match="not enough free CPUs for 2 exclusive: 1 left"):
        manager.allocate(second, compute(second))
    shared = pod("shared", "500m")
    assert manager.allocate(shared, compute(shared)) is None
    manager.release("first")
    assert manager.allocate(second, compute(second)) == {1, 2}
