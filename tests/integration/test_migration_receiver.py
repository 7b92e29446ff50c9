"""`runStrategy: WaitAsReceiver` against a real API server with virt-controller and a simulated node (no QEMU): the VM
creates a receiver VMI that waits in WaitingForSync with no launcher pod, as KubeVirt's does."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from pykubevirt.api import constants as c
from pykubevirt.client.resources import PODS, VIRTUAL_MACHINES
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest


@pytest_asyncio.fixture
async def cp(fresh_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(fresh_apiserver)
    yield plane
    await plane.stop()


async def test_a_receiver_vm_waits_for_a_migration_without_a_launcher(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("receiver", "WaitAsReceiver"), ns)
    vmi = await cp.wait_vmi_phase(ns, "receiver", c.PHASE_WAITING_FOR_SYNC)
    assert vmi["metadata"]["annotations"][c.CREATE_MIGRATION_TARGET_ANNOTATION] == "true"
    phases = [t["phase"] for t in vmi["status"]["phaseTransitionTimestamps"]]
    assert phases == [c.PHASE_PENDING, c.PHASE_WAITING_FOR_SYNC]
    await cp.wait_printable(ns, "receiver", "WaitingForReceiver")
    # No launcher pod: the domain would come from the migration's source.
    pods = await cp.admin.list(PODS, ns)
    assert pods["items"] == []
    # An ordinary VM next to it starts as usual.
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("ordinary"), ns)
    await cp.wait_vmi_phase(ns, "ordinary", c.PHASE_RUNNING)
    assert (await cp.vmi(ns, "receiver") or {})["status"]["phase"] == c.PHASE_WAITING_FOR_SYNC

    # Stopping the receiver deletes its waiting VMI; nothing holds it up.
    await cp.admin.patch(VIRTUAL_MACHINES, "receiver", {"spec": {"runStrategy": "Halted"}}, ns)
    await cp.wait_vmi_gone(ns, "receiver", vmi["metadata"]["uid"])
    await cp.wait_printable(ns, "receiver", "Stopped")
