"""virt-controller's part of a memory dump on a simulated node: a request in the VM's status moves the claim into
the VM's template and its VMI and out again, and ends Completed with the file's name on the claim.

The test plays virt-api (the request in the status) and virt-handler (the VMI's volume phases); tests/e2e runs the
whole path on a real guest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.client.api import JSON_PATCH, Object
from pykubevirt.client.errors import Conflict, Invalid
from pykubevirt.client.resources import (
    PERSISTENT_VOLUME_CLAIMS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


async def bound_claim(cp: ControlPlane, ns: str, name: str) -> None:
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "512Mi"}}},
    }
    created = await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, pvc, ns)
    created["status"] = {"phase": "Bound", "capacity": {"storage": "512Mi"}, "accessModes": ["ReadWriteOnce"]}
    await cp.admin.update_status(PERSISTENT_VOLUME_CLAIMS, created)


async def set_request(cp: ControlPlane, ns: str, name: str, request: dict[str, Any]) -> None:
    """What virt-api's memorydump and removememorydump write."""
    vm = await cp.admin.get(VIRTUAL_MACHINES, name, ns)
    current = (vm.get("status") or {}).get("memoryDumpRequest")
    patch = [
        {"op": "test", "path": "/status/memoryDumpRequest", "value": current},
        {"op": "replace" if current else "add", "path": "/status/memoryDumpRequest", "value": request},
    ]
    await cp.admin.patch(VIRTUAL_MACHINES, name, patch, ns, patch_type=JSON_PATCH, subresource="status")


async def handler_reports(cp: ControlPlane, ns: str, name: str, change: Any) -> None:
    """What virt-handler writes of the dump volume (retried: the controller writes the same VMI meanwhile)."""

    async def write() -> bool:
        vmi = await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, name, ns)
        statuses = change(vmi["status"].get("volumeStatus") or [])
        if statuses is None:
            return False
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": vmi["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/status/volumeStatus", "value": statuses},
        ]
        try:
            await cp.handler_client.patch(VIRTUAL_MACHINE_INSTANCES, name, patch, ns, patch_type=JSON_PATCH)
        except (Conflict, Invalid):  # a stale read (a failed test of the resourceVersion): read again
            return False
        return True

    await eventually(write, timeout=30, interval=0.2)


async def request_phase(cp: ControlPlane, ns: str, name: str, phase: str | None) -> Object:
    async def probe() -> Object | None:
        vm = await cp.admin.get(VIRTUAL_MACHINES, name, ns)
        request = (vm.get("status") or {}).get("memoryDumpRequest")
        found = request.get("phase") if request else None
        return vm if found == phase else None

    result: Object = await eventually(probe, timeout=30, interval=0.2)
    return result


async def test_a_memory_dump_request_runs_from_associating_to_completed_and_is_removed(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await bound_claim(cp, ns, "dump")
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("dumped"), ns)
    await cp.wait_vmi_phase(ns, "dumped", "Running", timeout=30)
    await set_request(cp, ns, "dumped", {"claimName": "dump", "phase": "Associating"})

    # The claim joins the template and the VMI as a hotpluggable memoryDump volume: InProgress.
    vm = await request_phase(cp, ns, "dumped", "InProgress")
    dump_volume = {"name": "dump", "memoryDump": {"claimName": "dump", "hotpluggable": True}}
    assert dump_volume in vm["spec"]["template"]["spec"]["volumes"]
    assert "dump" not in [d["name"] for d in vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"]]
    vmi = await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "dumped", ns)
    assert dump_volume in vmi["spec"]["volumes"]
    # A memory dump volume is hotplugged: no restart is required for it.
    assert "RestartRequired" not in [c["type"] for c in vm["status"].get("conditions") or []]

    async def entry_seen() -> bool:
        found = await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "dumped", ns)
        entry = next((s for s in found["status"].get("volumeStatus") or [] if s["name"] == "dump"), {})
        return entry.get("memoryDumpVolume") == {"claimName": "dump"} and entry.get("phase") == "AttachedToNode"

    await eventually(entry_seen, timeout=30, interval=0.2)

    def completed(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        done = {
            "claimName": "dump",
            "targetFileName": "dumped-dump-20261207-120000.memory.dump",
            "startTimestamp": "2026-12-07T12:00:00Z",
            "endTimestamp": "2026-12-07T12:00:03Z",
        }
        return [
            {**s, "phase": "MemoryDumpCompleted", "memoryDumpVolume": done} if s["name"] == "dump" else s
            for s in statuses
        ]

    await handler_reports(cp, ns, "dumped", completed)
    # Unmounting: the volume leaves the VMI (not the template), and the claim gets the file's name.
    vm = await request_phase(cp, ns, "dumped", "Unmounting")
    request = vm["status"]["memoryDumpRequest"]
    assert request["fileName"] == "dumped-dump-20261207-120000.memory.dump"
    assert (request["startTimestamp"], request["endTimestamp"]) == ("2026-12-07T12:00:00Z", "2026-12-07T12:00:03Z")

    async def unplugged() -> bool:
        found = await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "dumped", ns)
        return "dump" not in [v["name"] for v in found["spec"]["volumes"]]

    await eventually(unplugged, timeout=30, interval=0.2)
    pvc = await cp.admin.get(PERSISTENT_VOLUME_CLAIMS, "dump", ns)
    assert pvc["metadata"]["annotations"]["kubevirt.io/memory-dump"] == "dumped-dump-20261207-120000.memory.dump"

    # virt-handler drops the entry once unmounted: Completed.
    await handler_reports(cp, ns, "dumped", lambda statuses: [s for s in statuses if s["name"] != "dump"])
    vm = await request_phase(cp, ns, "dumped", "Completed")
    assert dump_volume in vm["spec"]["template"]["spec"]["volumes"]

    # removememorydump: the volume leaves the template and the request goes.
    await set_request(cp, ns, "dumped", {"claimName": "dump", "phase": "Dissociating", "remove": True})
    vm = await request_phase(cp, ns, "dumped", None)
    assert "dump" not in [v["name"] for v in vm["spec"]["template"]["spec"]["volumes"]]
    assert (await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "dumped", ns))["status"]["phase"] == "Running"
