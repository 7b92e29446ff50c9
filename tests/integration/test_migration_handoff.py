"""A migration's hand-over to virt-handler, against a real API server with virt-controller and a simulated node (no
QEMU): the VMI's migrationState is the new migration's alone, whatever an earlier one left there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from pykubevirt.client.api import JSON_PATCH
from pykubevirt.client.resources import MIGRATIONS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.waiting import consistently, eventually


@pytest_asyncio.fixture
async def cp(fresh_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(fresh_apiserver)
    yield plane
    await plane.stop()


async def test_a_migration_after_a_cancelled_one_starts_from_a_clean_state(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("vm"), ns)
    vmi = await cp.wait_vmi_phase(ns, "vm", "Running")
    conditions = [*(vmi["status"].get("conditions") or []), {"type": "LiveMigratable", "status": "True"}]
    # What a cancelled migration leaves on the VMI (the source recorded the abort).
    aborted = {
        "migrationUid": "earlier",
        "failed": True,
        "abortRequested": True,
        "abortStatus": "Succeeded",
        "failureReason": "Live migration has been aborted",
        "startTimestamp": "2026-12-02T03:00:00Z",
        "targetNodeAddress": "127.0.0.3",
    }
    ops = [
        {"op": "replace", "path": "/status/conditions", "value": conditions},
        {"op": "add", "path": "/status/migrationState", "value": aborted},
    ]
    await cp.handler_client.patch(VIRTUAL_MACHINE_INSTANCES, "vm", ops, ns, patch_type=JSON_PATCH)
    vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
    vmim |= {"metadata": {"name": "again"}, "spec": {"vmiName": "vm"}}
    created = await cp.admin.create(MIGRATIONS, vmim, ns)

    async def handed_over() -> dict[str, Any] | None:
        current = await cp.vmi(ns, "vm")
        state = ((current or {}).get("status") or {}).get("migrationState") or {}
        return state if state.get("migrationUid") == created["metadata"]["uid"] else None

    state = await eventually(handed_over)
    for field in aborted:
        if field != "migrationUid":
            assert field not in state, state

    # The controller did not take the earlier migration's end for this one's. It writes the migration's phase after
    # the VMI's hand-over, in a second request, so the phase is waited for, then watched for a failure that follows.
    async def phase() -> str:
        current = await cp.admin.get(MIGRATIONS, "again", ns)
        return str((current.get("status") or {}).get("phase") or "")

    async def prepared() -> str | None:
        value = await phase()
        assert value != "Failed", "the earlier migration's failure ended this one"
        return value if value in ("PreparingTarget", "TargetReady") else None

    await eventually(prepared)
    await consistently(prepared, for_=1.0)
