"""CPU and memory hotplug on a migration's target launcher, real QEMU (TCG) under the target's private libvirtd:
the domain arrives with one of its maxSockets vCPUs enabled and no virtio-mem device, then `syncvcpus` and
`syncmemory` change the running guest (KubeVirt's SyncVirtualMachineCPUs / SyncVirtualMachineMemory)."""

from __future__ import annotations

import asyncio
import copy
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from pykubevirt.handler.resource_hotplug import finalize_hotplug
from tests.integration.test_live_migration import TARGET_ADDRESS, migrate_request, wait_migration
from tests.support.launcher_process import LauncherProcess, defaulted_vmi, start_launcher

MI = 1 << 20


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LauncherProcess, LauncherProcess]]:
    uid = str(uuid.uuid4())
    source = start_launcher(tmp_path, "hot", uid, "--allow-emulation", libvirt_uri="")
    target = start_launcher(tmp_path, "hot", uid, "--allow-emulation", "--migration-target", libvirt_uri="")
    yield source, target
    for launcher in (source, target):
        launcher.stop()


def hotplug_vmi(uid: str) -> dict[str, Any]:
    """A VMI started with 1 of 4 sockets and 64Mi of a 128Mi maximum (the launcher does not check KubeVirt's
    1Gi minimum for memory hotplug, which keeps this TCG guest small)."""
    vmi = defaulted_vmi("hot", uid)
    vmi["spec"]["domain"]["cpu"] = {"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 4}
    vmi["spec"]["domain"]["memory"]["maxGuest"] = "128Mi"
    vmi["status"]["memory"] = {"guestAtBoot": "64Mi", "guestCurrent": "64Mi", "guestRequested": "64Mi"}
    return vmi


def target_domain(socket: str) -> ET.Element:
    conn = libvirt.open(f"qemu+unix:///system?socket={socket}")
    try:
        return ET.fromstring(conn.lookupByName("default_hot").XMLDesc(0))
    finally:
        conn.close()


async def test_the_target_plugs_vcpus_and_resizes_virtio_mem(pair: tuple[LauncherProcess, LauncherProcess]) -> None:
    source, target = pair
    await asyncio.gather(source.wait_ready(), target.wait_ready())
    vmi = hotplug_vmi(source.vmi_uid)
    assert (await source.client().request("sync", vmi=vmi))["domain"]["state"] == "Running"
    # The VMI as the VM controller left it before the migration: 2 sockets, 96Mi.
    grown = copy.deepcopy(vmi)
    grown["spec"]["domain"]["cpu"]["sockets"] = 2
    grown["spec"]["domain"]["memory"]["guest"] = "96Mi"
    prepared = await target.client().request(
        "preparemigrationtarget", vmi=grown, migration={"listenAddress": TARGET_ADDRESS}
    )
    await source.client().request("migrate", migration=migrate_request(prepared))
    await wait_migration(target, "Succeeded")
    socket = prepared["migration"]["libvirtSocket"]
    arrived = target_domain(socket)
    # The source's definition came along: one vCPU of four, no virtio-mem device yet.
    assert arrived.find("vcpu") is not None and arrived.findtext("vcpu") == "4"
    assert arrived.find("vcpu").get("current") == "1"
    assert arrived.find("devices/memory") is None

    await target.client().request("syncvcpus", vmi=grown)
    status = await target.client().request("syncmemory", vmi=grown)
    # The firmware idles with no virtio-mem driver: nothing is plugged, the guest keeps its boot memory.
    assert status["currentMemory"] == 64 * MI
    plugged = target_domain(socket)
    assert plugged.find("vcpu").get("current") == "2"
    enabled = [v.get("id") for v in plugged.findall("vcpus/vcpu") if v.get("enabled") == "yes"]
    assert enabled == ["0", "1"]
    device = plugged.find("devices/memory[@model='virtio-mem']")
    assert device is not None
    assert int(device.findtext("target/size") or 0) * 1024 == 64 * MI
    assert int(device.findtext("target/requested") or 0) * 1024 == 32 * MI

    # A second change resizes the same device.
    grown["spec"]["domain"]["memory"]["guest"] = "128Mi"
    await target.client().request("syncmemory", vmi=grown)
    resized = target_domain(socket).findall("devices/memory[@model='virtio-mem']")
    assert len(resized) == 1 and int(resized[0].findtext("target/requested") or 0) * 1024 == 64 * MI


async def test_the_target_handler_serves_the_hotplug_conditions(pair: tuple[LauncherProcess, LauncherProcess]) -> None:
    source, target = pair
    await asyncio.gather(source.wait_ready(), target.wait_ready())
    vmi = hotplug_vmi(source.vmi_uid)
    await source.client().request("sync", vmi=vmi)
    grown = copy.deepcopy(vmi)
    grown["spec"]["domain"]["cpu"]["sockets"] = 3
    grown["spec"]["domain"]["memory"]["guest"] = "96Mi"
    ready = {"type": "Ready", "status": "True"}
    grown["status"]["conditions"] = [ready, {"type": "HotVCPUChange", "status": "True"}]
    grown["status"]["conditions"].append({"type": "HotMemoryChange", "status": "True"})
    prepared = await target.client().request(
        "preparemigrationtarget", vmi=grown, migration={"listenAddress": TARGET_ADDRESS}
    )
    await source.client().request("migrate", migration=migrate_request(prepared))
    await wait_migration(target, "Succeeded")

    outcome = await finalize_hotplug(grown, target.client())
    assert outcome.warnings == []
    assert outcome.status["currentCPUTopology"] == {"sockets": 3, "cores": 1, "threads": 1}
    assert outcome.status["memory"]["guestRequested"] == "96Mi"
    assert outcome.status["conditions"] == [ready]
    assert target_domain(prepared["migration"]["libvirtSocket"]).find("vcpu").get("current") == "3"

    # A memory hotplug the launcher cannot do marks HotMemoryChange False, KubeVirt's reason and message.
    broken = copy.deepcopy(grown)
    del broken["status"]["memory"]["guestAtBoot"]
    broken["status"]["conditions"] = [ready, {"type": "HotMemoryChange", "status": "True"}]
    failed = await finalize_hotplug(broken, target.client())
    assert [message for _, message in failed.warnings] == ["failed to update guest memory"]
    assert failed.status["conditions"][1] == {
        "type": "HotMemoryChange",
        "status": "False",
        "reason": "MemoryHotplugFailed",
        "message": "memory hotplug failed, the VM configuration is not supported",
        "lastProbeTime": None,
        "lastTransitionTime": None,
    }
