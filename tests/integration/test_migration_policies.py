"""MigrationPolicies picked at a migration's hand-over, against a real API server with virt-controller and a
simulated node (no QEMU): the VMI's migrationState names the policy and carries the settings it gave."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from pykubevirt.client.api import JSON_PATCH, Object
from pykubevirt.client.resources import (
    MIGRATION_POLICIES,
    MIGRATIONS,
    NAMESPACES,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.waiting import eventually


@pytest_asyncio.fixture
async def cp(fresh_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(fresh_apiserver)
    yield plane
    await plane.stop()


def policy(name: str, vmi: dict[str, str], ns: dict[str, str] | None = None, **spec: Any) -> Object:
    selectors: dict[str, Any] = {"virtualMachineInstanceSelector": vmi}
    if ns is not None:
        selectors["namespaceSelector"] = ns
    return {
        "apiVersion": "migrations.kubevirt.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": name},
        "spec": {"selectors": selectors, **spec},
    }


async def test_the_best_matching_policy_sets_the_migration_configuration(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await cp.admin.patch(NAMESPACES, ns, {"metadata": {"labels": {"team": "db"}}})
    await cp.admin.create(MIGRATION_POLICIES, policy("broad", {"tier": "gold"}, bandwidthPerMigration="1Gi"))
    # One more matched label (the namespace's): this one wins.
    await cp.admin.create(
        MIGRATION_POLICIES,
        policy("narrow", {"tier": "gold"}, {"team": "db"}, completionTimeoutPerGiB=9, allowPostCopy=True),
    )
    body = vm_manifest("vm")
    body["spec"]["template"]["metadata"]["labels"]["tier"] = "gold"
    await cp.admin.create(VIRTUAL_MACHINES, body, ns)
    vmi = await cp.wait_vmi_phase(ns, "vm", "Running")
    conditions = [*(vmi["status"].get("conditions") or []), {"type": "LiveMigratable", "status": "True"}]
    ops = [{"op": "replace", "path": "/status/conditions", "value": conditions}]
    await cp.handler_client.patch(VIRTUAL_MACHINE_INSTANCES, "vm", ops, ns, patch_type=JSON_PATCH)
    vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
    vmim |= {"metadata": {"name": "move"}, "spec": {"vmiName": "vm"}}
    await cp.admin.create(MIGRATIONS, vmim, ns)

    async def handed_over() -> dict[str, Any] | None:
        current = await cp.vmi(ns, "vm")
        state = ((current or {}).get("status") or {}).get("migrationState") or {}
        return state if state.get("migrationConfiguration") else None

    state = await eventually(handed_over)
    assert state["migrationPolicyName"] == "narrow"
    settings = state["migrationConfiguration"]
    assert (settings["completionTimeoutPerGiB"], settings["allowPostCopy"]) == (9, True)
    assert settings["allowWorkloadDisruption"] is True, "a policy's allowPostCopy sets both"
    assert settings["bandwidthPerMigration"] == "0Mi", "the other policy's fields do not mix in"
    assert (settings["progressTimeout"], settings["parallelMigrationsPerCluster"]) == (150, 5)
