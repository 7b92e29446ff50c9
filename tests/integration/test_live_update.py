"""CPU and memory hotplug's controller half against the embedded API server and a simulated node: the VM controller
copies new sockets or guest memory onto the running VMI, the VMI controller marks it HotVCPUChange or HotMemoryChange,
the workload updater migrates it; a change hotplug cannot serve sets RestartRequired with KubeVirt's message."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from pykubevirt.client.api import JSON_PATCH, Object
from pykubevirt.client.resources import MIGRATIONS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


async def running_vm(cp: ControlPlane, name: str, guest: str = "128Mi") -> tuple[str, Object]:
    """A running VM whose template names its sockets (KubeVirt hotplugs only a topology the template sets)."""
    ns = await cp.namespace()
    body = vm_manifest(name)
    body["spec"]["template"]["spec"]["domain"]["cpu"] = {"sockets": 1}
    body["spec"]["template"]["spec"]["domain"]["memory"]["guest"] = guest
    await cp.admin.create(VIRTUAL_MACHINES, body, ns)
    return ns, await cp.wait_vmi_phase(ns, name, "Running")


async def set_sockets(cp: ControlPlane, ns: str, name: str, sockets: int) -> None:
    patch = [{"op": "replace", "path": "/spec/template/spec/domain/cpu/sockets", "value": sockets}]
    await cp.admin.patch(VIRTUAL_MACHINES, name, patch, ns, patch_type=JSON_PATCH)


async def declare_migratable(cp: ControlPlane, ns: str, name: str) -> None:
    """The simulated node reports no migratability; as virt-handler would, the VMI is declared LiveMigratable."""
    live = {"type": "LiveMigratable", "status": "True", "lastProbeTime": None, "lastTransitionTime": None}
    patch = [{"op": "add", "path": "/status/conditions/-", "value": live}]
    await cp.handler_client.patch(VIRTUAL_MACHINE_INSTANCES, name, patch, ns, patch_type=JSON_PATCH)


async def migration(cp: ControlPlane, ns: str) -> Object | None:
    found = (await cp.admin.list(MIGRATIONS, ns))["items"]
    return found[0] if found else None


def conditions(obj: Object | None) -> dict[str, Object]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


async def test_more_sockets_reach_the_running_vmi_and_start_a_hotplug_migration(cp: ControlPlane) -> None:
    ns, vmi = await running_vm(cp, "cpu-up")
    assert vmi["spec"]["domain"]["cpu"]["maxSockets"] == 4
    assert vmi["status"]["currentCPUTopology"] == {"sockets": 1}
    await set_sockets(cp, ns, "cpu-up", 2)

    async def marked() -> Object | None:
        current = await cp.vmi(ns, "cpu-up")
        spec_sockets = (current or {}).get("spec", {}).get("domain", {}).get("cpu", {}).get("sockets")
        return current if spec_sockets == 2 and "HotVCPUChange" in conditions(current) else None

    current = await eventually(marked)
    assert current["metadata"]["uid"] == vmi["metadata"]["uid"], "the same VMI, not a restart"
    assert conditions(current)["HotVCPUChange"]["status"] == "True"
    vm = await cp.vm(ns, "cpu-up")
    assert "RestartRequired" not in conditions(vm)

    await declare_migratable(cp, ns, "cpu-up")
    vmim = await eventually(lambda: migration(cp, ns))
    assert vmim["metadata"]["name"].startswith("kubevirt-workload-update-")
    assert vmim["metadata"]["annotations"] == {"kubevirt.io/workloadUpdateMigration": ""}
    assert vmim["spec"]["vmiName"] == "cpu-up" and vmim["spec"]["priority"] == "user-triggered"
    vm = await cp.vm(ns, "cpu-up")
    assert "RestartRequired" not in conditions(vm)


@pytest.mark.parametrize(
    ("sockets", "message"),
    [
        (5, "CPU sockets updated in template spec to a value higher than what's available"),
        (0, "a non-live-updatable field was changed in the template spec"),
    ],
)
async def test_changes_hotplug_cannot_serve_require_a_restart(cp: ControlPlane, sockets: int, message: str) -> None:
    name = f"cpu-restart-{sockets}"
    ns, _ = await running_vm(cp, name)
    if sockets:
        await set_sockets(cp, ns, name, sockets)
    else:
        # cores are not live-updatable.
        patch = [{"op": "add", "path": "/spec/template/spec/domain/cpu/cores", "value": 2}]
        await cp.admin.patch(VIRTUAL_MACHINES, name, patch, ns, patch_type=JSON_PATCH)

    async def restart() -> Object | None:
        return conditions(await cp.vm(ns, name)).get("RestartRequired")

    condition = await eventually(restart)
    assert condition["status"] == "True" and condition["message"] == message
    vmi = await cp.vmi(ns, name)
    assert vmi is not None and vmi["spec"]["domain"]["cpu"]["sockets"] == 1
    assert "HotVCPUChange" not in conditions(vmi)


async def test_more_guest_memory_reaches_the_running_vmi_and_start_a_hotplug_migration(cp: ControlPlane) -> None:
    ns, vmi = await running_vm(cp, "mem-up", guest="1Gi")
    assert vmi["spec"]["domain"]["memory"]["maxGuest"] == "4Gi"
    await declare_migratable(cp, ns, "mem-up")
    patch = [{"op": "replace", "path": "/spec/template/spec/domain/memory/guest", "value": "2Gi"}]
    await cp.admin.patch(VIRTUAL_MACHINES, "mem-up", patch, ns, patch_type=JSON_PATCH)

    async def marked() -> Object | None:
        current = await cp.vmi(ns, "mem-up")
        guest = (current or {}).get("spec", {}).get("domain", {}).get("memory", {}).get("guest")
        return current if guest == "2Gi" and "HotMemoryChange" in conditions(current) else None

    current = await eventually(marked)
    assert current["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert current["status"]["memory"]["guestRequested"] == "1Gi"
    vmim = await eventually(lambda: migration(cp, ns))
    assert vmim["metadata"]["annotations"] == {"kubevirt.io/workloadUpdateMigration": ""}
    assert "RestartRequired" not in conditions(await cp.vm(ns, "mem-up"))


async def test_memory_of_a_small_guest_is_not_hotpluggable(cp: ControlPlane) -> None:
    # KubeVirt gives maxGuest (and so memory hotplug) only to guests of 1Gi or more.
    ns, vmi = await running_vm(cp, "mem-small")
    assert "maxGuest" not in vmi["spec"]["domain"]["memory"]
    await declare_migratable(cp, ns, "mem-small")
    patch = [{"op": "replace", "path": "/spec/template/spec/domain/memory/guest", "value": "256Mi"}]
    await cp.admin.patch(VIRTUAL_MACHINES, "mem-small", patch, ns, patch_type=JSON_PATCH)

    async def restart() -> Object | None:
        return conditions(await cp.vm(ns, "mem-small")).get("RestartRequired")

    condition = await eventually(restart)
    message = "memory updated in template spec. Memory-hotplug is not available for this VM configuration"
    assert condition["message"] == message
