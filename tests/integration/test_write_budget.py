"""What one VM start → Running → stop costs in API writes, all components together, counted at the API server.

virt-controller and a simulated node (scheduler, kubelet and virt-handler) against an API server of the test's own,
so that its write counters (GET /debug/writes) hold this VM's writes only. A count, not a time: the figure is the
issue 18 budget, and a change that adds a write shows here with its verb and resource.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from pykubevirt.api.constants import VM_CONTROLLER_FINALIZER
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import NAMESPACES, PODS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from pykubevirt.controller.app import VirtController
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import (
    ControlPlane,
    client_for,
    printable_history,
    start_control_plane,
    vm_manifest,
)
from tests.support.waiting import eventually
from tests.support.watching import listed_once

pytestmark = pytest.mark.asyncio(loop_scope="function")

# The writes one start → Running → stop may cost (31 before status writes were coalesced, 28 before the VM's Stopped
# waited for its deleted VMI to go; issue 18).
# Start: the VM's finalizer, the start revision, the VMI, the launcher pod, the pod's unpaused gate, the VMI's moves
# to Scheduling and Scheduled, the binding, the kubelet's Running, virt-handler's Running, the VMI's Ready, the VM's
# Starting and Running, and one event each for the VMI and the pod: 15, each one KubeVirt's components make too.
# Stop: the VMI's generation annotation, its delete, the pod's delete (controller and kubelet), the VMI's Ready
# False while the pod terminates (KubeVirt's too: a pod marked for deletion counts as deleted), the kubelet's
# Succeeded, virt-handler's Succeeded, both finalizers, the VM's Stopping, its Stopped with the VMI gone in one
# write, two events: 13.
WRITE_BUDGET = 28
# The test's own writes (create the VM, set it Halted, its namespace) and the node's heartbeats are not the flow's.
NOT_COUNTED = {("other", "POST virtualmachines"), ("other", "PATCH virtualmachines"), ("other", "POST namespaces")}


@pytest_asyncio.fixture
async def cp(fresh_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(fresh_apiserver)
    yield plane
    await plane.stop()


async def write_counts(client: KubeClient, kind: str = "writes") -> Counter[tuple[str, str]]:
    """The API server's counts of writes done, or (kind "rejected") refused for the object's state."""
    counts = await client.request("GET", "/debug/writes")
    return Counter({(c["user"], c["resource"]): c["count"] for c in counts[kind]})


def flow_writes(before: Counter[tuple[str, str]], after: Counter[tuple[str, str]]) -> dict[tuple[str, str], int]:
    delta = {key: after[key] - before.get(key, 0) for key in after}
    return {key: n for key, n in sorted(delta.items()) if n and key not in NOT_COUNTED and key[1] != "PATCH nodes"}


def breakdown(writes: dict[tuple[str, str], int]) -> str:
    return "\n".join(f"  {n:3d}  {user}: {resource}" for (user, resource), n in writes.items())


async def test_one_start_to_running_and_stop_stays_within_the_write_budget(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    async with printable_history(cp.admin, ns, "budget") as printable:
        before = await write_counts(cp.admin)

        await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("budget"), ns)
        await cp.wait_printable(ns, "budget", "Running")
        await cp.admin.patch(VIRTUAL_MACHINES, "budget", {"spec": {"runStrategy": "Halted"}}, ns)

        async def stopped() -> bool:
            vm = await cp.vm(ns, "budget")
            status = (vm or {}).get("status") or {}
            pods = await cp.admin.list(PODS, ns)
            gone = await cp.vmi(ns, "budget") is None and not pods["items"]
            return gone and status.get("printableStatus") == "Stopped" and status.get("created") is False

        await eventually(stopped)
        await cp.controller.recorder.flush()
        writes = flow_writes(before, await write_counts(cp.admin))
        await eventually(lambda: printable[-1:] == ["Stopped"])  # the watch may trail the GETs above

    total = sum(writes.values())
    assert total <= WRITE_BUDGET, (
        f"one start → Running → stop cost {total} API writes, over the budget of {WRITE_BUDGET}:\n{breakdown(writes)}"
    )
    # Fewer writes, the same story for `kubectl get vm -w`.
    assert printable == ["Starting", "Running", "Stopping", "Stopped"], printable


async def test_a_sync_before_the_watch_brings_back_the_controllers_own_write_goes_on_from_that_write(
    fresh_apiserver: APIServerProcess,
) -> None:
    admin, client = client_for(fresh_apiserver), client_for(fresh_apiserver, "virt-controller")
    controller = VirtController(client)
    try:
        await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "early"}})
        await admin.create(VIRTUAL_MACHINES, vm_manifest("early"), "early")
        # Caches that list and then hear nothing: the controller's own writes never come back as events.
        await listed_once(*controller.informers)
        rejected = await write_counts(admin, "rejected")

        await controller.vm_reconciler.reconcile("early/early")  # the finalizer
        await controller.vm_reconciler.reconcile("early/early")  # woken again before the watch brought it back
        vm = await admin.get(VIRTUAL_MACHINES, "early", "early")
        assert VM_CONTROLLER_FINALIZER in vm["metadata"]["finalizers"]
        # The second sync saw the finalizer it had written and started the VM, instead of sending the same patch
        # from the version it replaced and having it refused.
        vmi = await admin.get(VIRTUAL_MACHINE_INSTANCES, "early", "early")
        assert vmi["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
        assert await write_counts(admin, "rejected") == rejected
    finally:
        await controller.recorder.flush()
        await admin.close()
        await client.close()
