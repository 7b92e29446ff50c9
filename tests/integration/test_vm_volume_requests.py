"""With the HotplugVolumes gate in the KubeVirt object, a VM's addvolume/removevolume queue a status.volumeRequests
entry (KubeVirt's legacy hotplug path) and the VM controller applies it to the template and to the running VMI,
then clears it; without the gate the template is patched at once (DeclarativeHotplugVolumes)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pykubevirt.client.resources import KUBEVIRTS, PERSISTENT_VOLUME_CLAIMS, VIRTUAL_MACHINES
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.http_client import APIClient
from tests.support.waiting import eventually

SUB = "/apis/subresources.kubevirt.io/v1"
ADD = {
    "name": "disk1",
    "disk": {"disk": {"bus": "scsi"}},
    "volumeSource": {"persistentVolumeClaim": {"claimName": "disk1"}},
}


def names(spec: dict[str, Any]) -> list[str]:
    return [v["name"] for v in spec.get("volumes") or []]


async def requests_seen(cp: ControlPlane, ns: str, name: str, seen: list[Any], done: asyncio.Event) -> None:
    """Every value of the VM's status.volumeRequests, in order, from a watch (no version is missed)."""
    while not done.is_set():
        async for event in cp.admin.watch(VIRTUAL_MACHINES, ns, field_selector=f"metadata.name={name}"):
            value = (event.object.get("status") or {}).get("volumeRequests")
            if not seen or seen[-1] != value:
                seen.append(value)


async def test_volume_requests_are_queued_applied_and_cleared(fresh_apiserver: APIServerProcess) -> None:
    cp = await start_control_plane(fresh_apiserver)
    try:
        kubevirt = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt"},
            "spec": {"configuration": {"developerConfiguration": {"featureGates": ["HotplugVolumes"]}}},
        }
        await cp.admin.create(KUBEVIRTS, kubevirt, "kubevirt")
        ns = await cp.namespace()
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "disk1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
        }
        await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
        await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("vr"), ns)
        await cp.wait_printable(ns, "vr", "Running")
        seen: list[Any] = []
        done = asyncio.Event()
        watcher = asyncio.create_task(requests_seen(cp, ns, "vr", seen, done))

        async def specs(wanted: list[str]) -> bool:
            vm, vmi = await cp.vm(ns, "vr"), await cp.vmi(ns, "vr")
            assert vm is not None and vmi is not None
            cleared = not (vm.get("status") or {}).get("volumeRequests")
            return cleared and names(vm["spec"]["template"]["spec"]) == names(vmi["spec"]) == wanted

        async with APIClient(fresh_apiserver) as http:
            path = f"{SUB}/namespaces/{ns}/virtualmachines/vr"
            reply = await http.put(f"{path}/addvolume", ADD)
            assert reply.status == 202, reply.body
            await eventually(lambda: specs(["root", "disk1"]), timeout=20)
            vm = await cp.vm(ns, "vr")
            assert vm is not None
            disk = vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][-1]
            assert disk == {"name": "disk1", "disk": {"bus": "scsi"}}

            # A second add of the same volume is refused by the template check, before anything is queued.
            reply = await http.put(f"{path}/addvolume", ADD)
            assert reply.status == 409
            assert "Unable to add volume [disk1] because volume with that name already exists" in reply.body["message"]

            reply = await http.put(f"{path}/removevolume", {"name": "disk1"})
            assert reply.status == 202, reply.body
            await eventually(lambda: specs(["root"]), timeout=20)
        done.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        queued = [value for value in seen if value]
        added = {
            "name": "disk1",
            "disk": {"name": "disk1", "disk": {"bus": "scsi"}},
            "volumeSource": {"persistentVolumeClaim": {"claimName": "disk1", "hotpluggable": True}},
        }
        assert queued == [[{"addVolumeOptions": added}], [{"removeVolumeOptions": {"name": "disk1"}}]]
        assert seen[-1] is None
    finally:
        await cp.stop()
