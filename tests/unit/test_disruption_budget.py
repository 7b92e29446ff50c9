"""PodDisruptionBudget arithmetic (kube's disruption controller and eviction REST) and evacuation selection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pykubevirt.api import errors
from pykubevirt.apiserver.disruption_budget import VIOLATION_MESSAGE, budget_status, check_eviction, covers
from pykubevirt.config.cluster_config import ClusterConfig, MigrationConfig
from pykubevirt.controller.evacuation_controller import capacity, drain_tainted, migration_manifest, needs_evacuation

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
Obj = dict[str, Any]


def pod(name: str, ready: bool = True, **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {"app": "web"}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pdb(**spec: Any) -> Obj:
    return {
        "metadata": {"name": "web", "namespace": "ns", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "ready", "expected"),
    [
        ({"minAvailable": 2}, [True, True, True], (1, 2, 3, 3)),
        ({"minAvailable": "50%"}, [True, True, True], (1, 2, 3, 3)),  # 50% of 3 rounds up to 2
        ({"maxUnavailable": 1}, [True, True, False], (0, 2, 2, 3)),
        ({"maxUnavailable": "34%"}, [True, True, True], (2, 1, 3, 3)),  # 34% of 3 rounds up to 2 unavailable
        ({"minAvailable": 0}, [], (0, 0, 0, 0)),
    ],
)
def test_status(spec: Obj, ready: list[bool], expected: tuple[int, int, int, int]) -> None:
    pods = [pod(f"p{i}", r) for i, r in enumerate(ready)]
    status = budget_status(pdb(**spec), pods, NOW)
    got = (status["disruptionsAllowed"], status["desiredHealthy"], status["currentHealthy"], status["expectedPods"])
    assert got == expected
    condition = status["conditions"][0]
    assert (condition["status"], condition["reason"]) == (
        ("True", "SufficientPods") if expected[0] else ("False", "InsufficientPods")
    )


def test_selection() -> None:
    assert covers(pdb(), pod("a"))
    assert not covers(pdb(), pod("b", app="db"))
    assert covers({**pdb(), "spec": {"selector": {}}}, pod("b", app="db"))
    assert not covers({**pdb(), "spec": {}}, pod("a"))


def test_evicted_pods_stop_counting_until_deleted_or_timed_out() -> None:
    budget = pdb(minAvailable=1)
    budget["status"] = {"disruptedPods": {"p0": (NOW - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")}}
    status = budget_status(budget, [pod("p0"), pod("p1")], NOW)
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (1, 0)
    assert "p0" in status["disruptedPods"]
    later = budget_status(budget, [pod("p0"), pod("p1")], NOW + timedelta(minutes=3))
    assert (later["currentHealthy"], "disruptedPods" in later) == (2, False)


def test_eviction_checks() -> None:
    budget = pdb(minAvailable=1)
    budget["status"] = budget_status(budget, [pod("p0"), pod("p1")], NOW)
    taken = check_eviction(budget, pod("p0"), NOW)
    assert taken is not None and taken["disruptionsAllowed"] == 0 and "p0" in taken["disruptedPods"]
    with pytest.raises(errors.APIError) as refused:
        check_eviction({**budget, "status": taken}, pod("p1"), NOW)
    assert (refused.value.code, refused.value.message) == (429, VIOLATION_MESSAGE)
    stale = {**budget, "metadata": {**budget["metadata"], "generation": 2}}
    with pytest.raises(errors.APIError) as processing:
        check_eviction(stale, pod("p1"), NOW)
    assert processing.value.details == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web is still being processed by the server.",
            }
        ]
    }
    # An unready pod may go while the budget is met, without taking a disruption.
    assert check_eviction(budget, pod("p2", ready=False), NOW) is None


def vmi(name: str, strategy: str = "LiveMigrate", migratable: bool = True, **status: Any) -> Obj:
    condition = {"type": "LiveMigratable", "status": "True" if migratable else "False"}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"evictionStrategy": strategy},
        "status": {"nodeName": "node01", "phase": "Running", "conditions": [condition], **status},
    }


def test_which_vmis_are_evacuated() -> None:
    marked = {"evacuationNodeName": "node01"}
    assert needs_evacuation(vmi("a", **marked), "node01", False, "LiveMigrate")
    assert not needs_evacuation(vmi("a"), "node01", False, "LiveMigrate")
    assert needs_evacuation(vmi("a"), "node01", True, "LiveMigrate")
    assert not needs_evacuation(vmi("a", migratable=False, **marked), "node01", False, "LiveMigrateIfPossible")
    assert not needs_evacuation(vmi("a", **marked), "node01", False, "External")
    assert not needs_evacuation(vmi("a", **marked), "node01", False, "None")
    assert not needs_evacuation(vmi("a", **marked), "node02", False, "LiveMigrate")
    assert drain_tainted(
        {"spec": {"taints": [{"key": "kubevirt.io/drain", "effect": "NoSchedule"}]}}, "kubevirt.io/drain"
    )
    assert not drain_tainted(
        {"spec": {"taints": [{"key": "kubevirt.io/drain", "effect": "NoExecute"}]}}, "kubevirt.io/drain"
    )


def test_capacity_and_manifest() -> None:
    config = ClusterConfig(migrations=MigrationConfig(parallel_migrations_per_cluster=3))
    running = [{"spec": {"vmiName": n}, "status": {"phase": "Running"}} for n in ("x", "y")]
    done = [{"spec": {"vmiName": "z"}, "status": {"phase": "Succeeded"}}]
    nodes = {"x": "node01", "y": "node02", "z": "node01"}
    room = capacity(config, running + done, lambda m: nodes[m["spec"]["vmiName"]], "node01")
    assert (room.cluster, room.node, room.available) == (1, 1, 1)
    manifest = migration_manifest(vmi("a"), "node01")
    assert manifest["metadata"] == {
        "generateName": "kubevirt-evacuation-",
        "namespace": "ns",
        "annotations": {"kubevirt.io/evacuationMigration": "node01"},
    }
    assert manifest["spec"] == {"vmiName": "a", "priority": "system-critical"}
