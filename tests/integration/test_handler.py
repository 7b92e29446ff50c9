"""virt-handler against a real API server process and real virt-launcher processes on libvirt's test driver (no QEMU).

Each test runs the whole VirtHandler (VMI informer, reconciler, heartbeat, its HTTP endpoint) in the test's loop for a
Node of its own, and plays virt-controller's part by hand: it creates the VMI, starts its launcher in a pod directory
under the handler's pods dir, and marks the VMI Scheduled on the node with that pod active.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import (
    EVENTS,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    VIRTUAL_MACHINE_INSTANCES,
)
from pykubevirt.controller.volume_status import volume_statuses
from pykubevirt.handler.app import HandlerOptions, VirtHandler
from pykubevirt.launcher.protocol import PROTOCOL_VERSION
from pykubevirt.virtapi.identities import HANDLER_USER
from pykubevirt.virtapi.volumes import parse_add, parse_remove, spec_patch, verify
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for, eventually
from tests.support.launcher_process import LauncherProcess, small_vmi, start_launcher

# The handler listens on an address of its own, as on a node `pykubevirt up` starts.
HANDLER_IP = "127.0.0.6"


@dataclass
class Node:
    """One node's virt-handler and the launchers of its pods."""

    admin: KubeClient
    controller: KubeClient
    handler: VirtHandler
    task: asyncio.Task[None]
    name: str
    namespace: str
    tmp_path: Path
    launchers: list[LauncherProcess] = field(default_factory=list)

    @property
    def pods_dir(self) -> Path:
        return self.tmp_path / "pods"

    async def create_vmi(self, name: str, **spec: Any) -> Object:
        body = small_vmi(name, self.namespace, **spec)
        return await self.admin.create(VIRTUAL_MACHINE_INSTANCES, body, self.namespace)

    async def schedule(self, vmi: Object, pod_uid: str) -> None:
        """What virt-controller does once the launcher pod runs on the node: label, nodeName, activePods, Scheduled."""
        patch = {
            "metadata": {"labels": {c.NODE_NAME_LABEL: self.name}},
            "status": {"nodeName": self.name, "activePods": {pod_uid: self.name}, "phase": c.PHASE_SCHEDULED},
        }
        await self.controller.patch(VIRTUAL_MACHINE_INSTANCES, vmi["metadata"]["name"], patch, self.namespace)

    async def run_vmi(self, name: str, **spec: Any) -> tuple[Object, LauncherProcess]:
        """A VMI with a launcher of its own, scheduled here; returned once the handler reports it Running."""
        vmi = await self.create_vmi(name, **spec)
        launcher = start_launcher(self.tmp_path, name, vmi["metadata"]["uid"], namespace=self.namespace)
        self.launchers.append(launcher)
        await self.schedule(vmi, launcher.pod_uid)
        return await self.wait_phase(name, c.PHASE_RUNNING), launcher

    async def vmi(self, name: str) -> Object:
        return await self.admin.get(VIRTUAL_MACHINE_INSTANCES, name, self.namespace)

    async def wait_vmi(self, name: str, check: Any, what: str, timeout: float = 20.0) -> Object:  # noqa: ASYNC109
        async def probe() -> Object | None:
            vmi = await self.vmi(name)
            return vmi if check(vmi) else None

        try:
            return await eventually(probe, timeout=timeout)
        except AssertionError:
            status = (await self.vmi(name)).get("status")
            raise AssertionError(f"VMI {name} not {what}: {status}; events {await self.events(name)}") from None

    async def wait_phase(self, name: str, phase: str) -> Object:
        return await self.wait_vmi(name, lambda vmi: (vmi.get("status") or {}).get("phase") == phase, phase)

    async def events(self, name: str) -> list[tuple[str, str, str]]:
        await self.handler.recorder.flush()
        events = (await self.admin.list(EVENTS, self.namespace))["items"]
        return [
            (e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            for e in events
            if e.get("involvedObject", {}).get("name") == name
        ]

    async def wait_event(self, name: str, reason: str) -> tuple[str, str, str]:
        async def probe() -> tuple[str, str, str] | None:
            return next((e for e in await self.events(name) if e[1] == reason), None)

        return await eventually(probe)

    async def handler_put(self, name: str, action: str) -> int:
        path = c.HANDLER_VMI_PATH.format(namespace=self.namespace, name=name)
        async with (
            aiohttp.ClientSession() as session,
            session.put(f"http://{HANDLER_IP}:{self.handler.api.port}{path}/{action}") as response,
        ):
            return response.status


@pytest.fixture
async def node(apiserver: APIServerProcess, tmp_path: Path) -> AsyncIterator[Node]:
    admin = client_for(apiserver)
    controller = client_for(apiserver, "virt-controller")
    handler_client = client_for(apiserver, "virt-handler")
    suffix = uuid.uuid4().hex[:8]
    name, namespace = f"handler-{suffix}", f"hd-{suffix}"
    await admin.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    options = HandlerOptions(
        node=name,
        pods_dir=tmp_path / "pods",
        state_dir=tmp_path / "state",
        heartbeat_interval=1.0,
        resync_seconds=5.0,
        node_ip=HANDLER_IP,
    )
    handler = VirtHandler(handler_client, options)
    task = asyncio.create_task(handler.run())
    env = Node(admin, controller, handler, task, name, namespace, tmp_path)
    yield env
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    for launcher in env.launchers:
        launcher.stop()
    # Nothing else finishes these VMIs (no virt-controller): drop their finalizers so the namespace can go.
    for vmi in (await admin.list(VIRTUAL_MACHINE_INSTANCES, namespace))["items"]:
        with contextlib.suppress(NotFound):
            unblocked: Object = {"metadata": {"finalizers": []}}
            await admin.patch(VIRTUAL_MACHINE_INSTANCES, vmi["metadata"]["name"], unblocked, namespace)
    with contextlib.suppress(NotFound):
        await admin.delete(NAMESPACES, namespace)
    with contextlib.suppress(NotFound):
        await admin.delete(NODES, name)
    for client in (admin, controller, handler_client):
        await client.close()


async def test_a_scheduled_vmi_runs_and_a_graceful_delete_ends_it_succeeded(node: Node) -> None:
    vmi, launcher = await node.run_vmi("graceful")
    status = vmi["status"]
    assert [t["phase"] for t in status["phaseTransitionTimestamps"]][-1] == c.PHASE_RUNNING
    assert [(i["name"], i["ipAddress"]) for i in status["interfaces"]] == [("default", "10.0.2.15")]
    reported = await launcher.client().status()
    assert reported["domain"]["state"] == "Running" and reported["domain"]["name"] == f"{node.namespace}_graceful"
    assert reported["protocolVersion"] == PROTOCOL_VERSION
    assert ("Normal", "Started", "VirtualMachineInstance started.") in await node.events("graceful")

    await node.admin.delete(VIRTUAL_MACHINE_INSTANCES, "graceful", node.namespace)
    # The test driver powers off on the ACPI button at once: a clean shutdown, so the VMI Succeeded.
    done = await node.wait_phase("graceful", c.PHASE_SUCCEEDED)
    assert done["metadata"]["deletionTimestamp"]
    events = await node.events("graceful")
    assert ("Normal", "ShuttingDown", "Signaled Graceful Shutdown") in events
    assert ("Normal", "Stopped", "The VirtualMachineInstance was shut down.") in events
    # The final VMI's domain is undefined, so the launcher exits and its pod completes; the handler forgets the VMI.
    assert await launcher.wait_exit() == 0
    await node.wait_event("graceful", "Deleted")
    assert node.handler.records.get(f"{node.namespace}/graceful") is None


async def test_no_grace_period_destroys_the_domain_without_acpi(node: Node) -> None:
    _, launcher = await node.run_vmi("nograce", terminationGracePeriodSeconds=0)
    await node.admin.delete(VIRTUAL_MACHINE_INSTANCES, "nograce", node.namespace)
    # Destroyed with no grace period asked for is still a clean stop (KubeVirt's Succeeded for reason Destroyed).
    await node.wait_phase("nograce", c.PHASE_SUCCEEDED)
    events = await node.events("nograce")
    assert ("Normal", "Deleted", "VirtualMachineInstance stopping") in events
    assert not [e for e in events if e[1] == "ShuttingDown"]
    assert await launcher.wait_exit() == 0


async def test_pause_and_unpause_through_the_handler_endpoint_set_and_clear_the_paused_condition(node: Node) -> None:
    await node.run_vmi("pausable")
    assert await node.handler_put("pausable", "pause") == 200

    def paused(vmi: Object) -> bool:
        return any(x.get("type") == "Paused" for x in (vmi.get("status") or {}).get("conditions") or [])

    vmi = await node.wait_vmi("pausable", paused, "paused")
    condition = next(x for x in vmi["status"]["conditions"] if x["type"] == "Paused")
    assert (condition["status"], condition["reason"]) == ("True", "PausedByUser")
    assert vmi["status"]["phase"] == c.PHASE_RUNNING
    assert await node.handler_put("pausable", "unpause") == 200
    await node.wait_vmi("pausable", lambda vmi: not paused(vmi), "unpaused")
    assert await node.handler_put("missing", "pause") == 404


async def test_a_launcher_that_dies_fails_its_vmi(node: Node) -> None:
    _, launcher = await node.run_vmi("doomed")
    launcher.process.send_signal(signal.SIGKILL)
    launcher.process.wait()
    # Its socket is left behind with nobody answering: unresponsive, not initializing.
    failed = await node.wait_phase("doomed", c.PHASE_FAILED)
    assert failed["status"]["phase"] == c.PHASE_FAILED
    assert ("Warning", "Stopped", "The VirtualMachineInstance crashed.") in await node.events("doomed")


async def test_a_launcher_gone_right_after_its_guest_shut_down_leaves_the_vmi_succeeded(node: Node) -> None:
    _, launcher = await node.run_vmi("quick-exit")
    watch = launcher.client().watch()
    assert (await anext(watch))["domain"]["state"] == "Running"
    await node.admin.delete(VIRTUAL_MACHINE_INSTANCES, "quick-exit", node.namespace)
    async for status in watch:
        if status["domain"]["state"] == "Shutoff":
            break
    # The launcher goes before the handler asks it again (nothing yields to this loop, which the handler shares):
    # what it said last on the handler's watch is all there is to know, and it said the guest shut down cleanly.
    # It writes to its watchers in the order they registered, and the handler's watch registered before this one
    # (before the domain was defined), so the handler's copy is on its socket already.
    launcher.process.send_signal(signal.SIGKILL)
    launcher.process.wait()
    await watch.aclose()
    done = await node.wait_phase("quick-exit", c.PHASE_SUCCEEDED)
    assert done["status"]["phase"] == c.PHASE_SUCCEEDED
    events = await node.events("quick-exit")
    assert ("Normal", "Stopped", "The VirtualMachineInstance was shut down.") in events
    assert ("Warning", "Stopped", "The VirtualMachineInstance crashed.") not in events

    def forgotten(_: Object) -> bool:
        return node.handler.records.get(f"{node.namespace}/quick-exit") is None

    await node.wait_vmi("quick-exit", forgotten, "forgotten by the handler")


async def test_the_heartbeat_marks_the_node_schedulable_and_publishes_the_handler_address(node: Node) -> None:
    async def beaten() -> Object | None:
        found = await node.admin.get(NODES, node.name)
        annotations = found["metadata"].get("annotations") or {}
        return found if c.HEARTBEAT_ANNOTATION in annotations and c.HANDLER_ADDRESS_ANNOTATION in annotations else None

    found = await eventually(beaten)
    assert found["metadata"]["labels"][c.NODE_SCHEDULABLE_LABEL] == "true"
    assert found["metadata"]["annotations"][c.HANDLER_ADDRESS_ANNOTATION] == f"{HANDLER_IP}:{node.handler.api.port}"
    first = found["metadata"]["annotations"][c.HEARTBEAT_ANNOTATION]

    async def beaten_again() -> bool:
        again = await node.admin.get(NODES, node.name)
        return bool(again["metadata"]["annotations"][c.HEARTBEAT_ANNOTATION] != first)

    await eventually(beaten_again, timeout=5.0)


async def test_a_launcher_of_another_protocol_version_shows_on_the_vmi(node: Node) -> None:
    vmi = await node.create_vmi("mismatch")
    pod_uid = str(uuid.uuid4())
    sockets = node.pods_dir / pod_uid / "volumes" / "sockets"
    sockets.mkdir(parents=True)
    old_status = {"id": 1, "ok": True, "domain": {"state": "Running", "reason": "Booted", "defined": True}}

    # A launcher from before the protocol had versions (no such build exists to run): it answers without one.
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readline():
            writer.write(json.dumps(old_status).encode() + b"\n")
            await writer.drain()
        writer.close()

    # Pod volume paths are too long for a unix socket; like a launcher, it listens on a short path linked from there.
    short = Path(tempfile.mkdtemp(prefix="pkv-old-", dir="/tmp"))
    (sockets / "launcher-sock").symlink_to(short / "sock")

    def unsynchronized(vmi: Object) -> bool:
        conditions = (vmi.get("status") or {}).get("conditions") or []
        return any(x["type"] == "Synchronized" and x["status"] == "False" for x in conditions)

    try:
        async with await asyncio.start_unix_server(serve, path=str(short / "sock")):
            await node.schedule(vmi, pod_uid)
            found = await node.wait_vmi("mismatch", unsynchronized, "Synchronized=False")
    finally:
        shutil.rmtree(short)
    condition = next(x for x in found["status"]["conditions"] if x["type"] == "Synchronized")
    assert condition["message"].startswith(
        f"virt-launcher speaks no protocol version, this side speaks version {PROTOCOL_VERSION}"
    )
    assert found["status"]["phase"] == c.PHASE_SCHEDULED
    event = await node.wait_event("mismatch", "SyncFailed")
    assert event[0] == "Warning" and "must be upgraded together" in event[2]


async def _bound_claim(node: Node, name: str) -> Path:
    """A filesystem claim bound by hand to a hostPath volume in the test's directory (no PV controller runs here)."""
    path = node.tmp_path / "volumes" / name
    path.mkdir(parents=True)
    pv_name = f"{node.namespace}-{name}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "16Mi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": str(path)},
            "claimRef": {"namespace": node.namespace, "name": name},
        },
    }
    await node.admin.create(PERSISTENT_VOLUMES, pv)
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": node.namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "16Mi"}},
            "volumeName": pv_name,
            "storageClassName": "",
        },
    }
    created = await node.admin.create(PERSISTENT_VOLUME_CLAIMS, pvc, node.namespace)
    created["status"] = {"phase": "Bound", "capacity": {"storage": "16Mi"}, "accessModes": ["ReadWriteOnce"]}
    await node.admin.update_status(PERSISTENT_VOLUME_CLAIMS, created)
    return path


async def _play_controller(node: Node, name: str, claim: str = "data") -> None:
    """virt-controller's part: the hotplugged volume's status entry, AttachedToNode once the claim is bound."""
    vmi = await node.vmi(name)
    claims = {f"{node.namespace}/{claim}": await node.admin.get(PERSISTENT_VOLUME_CLAIMS, claim, node.namespace)}
    statuses = volume_statuses(vmi, claims.get)
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": vmi["metadata"]["resourceVersion"]},
        {"op": "add", "path": "/status/volumeStatus", "value": statuses},
    ]
    await node.controller.patch(VIRTUAL_MACHINE_INSTANCES, name, ops, node.namespace, patch_type=JSON_PATCH)


async def test_a_hotplugged_claim_is_mounted_into_the_launcher_offered_to_libvirt_then_unplugged(node: Node) -> None:
    """The handler↔launcher hotplug path; libvirt's test driver cannot attach devices, so e2e covers the guest."""
    vmi, launcher = await node.run_vmi("hp")
    claim_dir = await _bound_claim(node, "data")

    # virt-api's addvolume on the VMI: the spec gains a hotpluggable volume and its SCSI disk.
    body = {
        "name": "data",
        "disk": {"disk": {"bus": "scsi"}, "serial": "data"},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "data"}},
    }
    add = parse_add(json.dumps(body).encode())
    assert verify(vmi["spec"]["volumes"], add) is None
    patch = spec_patch("", vmi["spec"], add)
    await node.controller.patch(VIRTUAL_MACHINE_INSTANCES, "hp", patch, node.namespace, patch_type=JSON_PATCH)
    await _play_controller(node, "hp")

    def phase_of(vmi: Object) -> str:
        entry = next((s for s in vmi["status"].get("volumeStatus") or [] if s["name"] == "data"), {})
        return str(entry.get("phase") or "")

    mounted = await node.wait_vmi("hp", lambda v: phase_of(v) == "MountedToPod", "with data MountedToPod")
    entry = next(s for s in mounted["status"]["volumeStatus"] if s["name"] == "data")
    assert entry["hotplugVolume"] == {} and entry["reason"] == "VolumeMountedToPod"
    assert entry["message"] == "Volume data has been mounted in virt-launcher pod"
    # Mounting made the claim's disk.img (16Mi, sparse) and linked it where the domain's disk will point.
    assert (claim_dir / "disk.img").stat().st_size == 16 * 1024 * 1024
    link = Path(pod_layout.short_runtime_dir(launcher.pod_uid)) / "hotplug-disks" / "data.img"
    assert link.resolve() == (claim_dir / "disk.img").resolve()
    # The launcher then asked libvirt to attach the disk to the live domain: the test driver refuses.
    failed = await node.wait_event("hp", "SyncFailed")
    assert failed[0] == "Warning" and "attaching volume data failed" in failed[2]
    assert "virDomainAttachDeviceFlags" in failed[2]

    # removevolume: the volume leaves the spec; the handler detaches and unmounts it, and the entry goes.
    latest = await node.vmi("hp")
    remove = parse_remove(b'{"name": "data"}')
    assert verify(latest["spec"]["volumes"], remove) is None
    patch = spec_patch("", latest["spec"], remove)
    await node.controller.patch(VIRTUAL_MACHINE_INSTANCES, "hp", patch, node.namespace, patch_type=JSON_PATCH)
    gone = await node.wait_vmi("hp", lambda v: phase_of(v) == "", "without data")
    assert gone["status"]["phase"] == c.PHASE_RUNNING
    assert not link.is_symlink()
    events = await node.events("hp")
    assert ("Normal", "VolumeDetaching", "Volume data is being detached from the VM") in events
    assert ("Normal", "VolumeUnplugged", "Volume data has been unplugged") in events
    # The data stays on the claim.
    assert (claim_dir / "disk.img").exists()


async def test_a_memory_dump_volume_is_mounted_as_a_directory_and_the_dump_reported(node: Node) -> None:
    """The handler↔launcher memory dump path; libvirt's test driver refuses memory-only dumps, so the failure is
    what is reported here (e2e covers a real guest's dump)."""
    vmi, launcher = await node.run_vmi("md")
    claim_dir = await _bound_claim(node, "dump")
    (claim_dir / "md-dump-20260101-000000.memory.dump").write_bytes(b"an earlier dump")
    # What virt-controller does for an Associating request: the claim joins the VMI as a memoryDump volume.
    volumes = [*vmi["spec"]["volumes"], {"name": "dump", "memoryDump": {"claimName": "dump", "hotpluggable": True}}]
    patch = [{"op": "replace", "path": "/spec/volumes", "value": volumes}]
    await node.controller.patch(VIRTUAL_MACHINE_INSTANCES, "md", patch, node.namespace, patch_type=JSON_PATCH)
    await _play_controller(node, "md", "dump")

    def entry_of(vmi: Object) -> dict[str, Any]:
        return next((s for s in vmi["status"].get("volumeStatus") or [] if s["name"] == "dump"), {})

    failed = await node.wait_vmi("md", lambda v: entry_of(v).get("phase") == "MemoryDumpFailed", "dump failed")
    entry = entry_of(failed)
    dump = entry["memoryDumpVolume"]
    assert dump["claimName"] == "dump"
    assert re.fullmatch(r"md-dump-\d{8}-\d{6}\.memory\.dump", dump["targetFileName"])
    assert dump["startTimestamp"] <= dump["endTimestamp"]
    assert entry["message"].startswith("Memory dump to pvc dump failed: Domain memory dump failed: ")
    assert "unsupported flags" in entry["message"]
    # Mounted as the claim's directory (no disk.img, no disk in the domain); the earlier dump was cleared first.
    link = Path(pod_layout.short_runtime_dir(launcher.pod_uid)) / "hotplug-disks" / "dump"
    assert link.resolve() == claim_dir.resolve()
    assert not (claim_dir / "disk.img").exists() and not list(claim_dir.iterdir())
    events = await node.events("md")
    assert ("Normal", "VolumeMountedToPod", "Memory dump Volume dump is attached, getting memory dump") in events
    assert not any(reason == "SyncFailed" for _, reason, _ in events)

    # Taken off the VMI again (the request's Unmounting), it is unmounted and its entry goes.
    latest = await node.vmi("md")
    volumes = [v for v in latest["spec"]["volumes"] if v["name"] != "dump"]
    patch = [{"op": "replace", "path": "/spec/volumes", "value": volumes}]
    await node.controller.patch(VIRTUAL_MACHINE_INSTANCES, "md", patch, node.namespace, patch_type=JSON_PATCH)
    await node.wait_vmi("md", lambda v: not entry_of(v), "without dump")
    assert not link.is_symlink()


async def test_a_masquerade_guest_without_a_pod_network_falls_back_to_user_networking_with_a_warning(
    node: Node,
) -> None:
    domain = small_vmi("x")["spec"]["domain"]
    domain["devices"]["interfaces"] = [{"name": "default", "masquerade": {}}]
    vmi, _ = await node.run_vmi("fallback", domain=domain, networks=[{"name": "default", "pod": {}}])
    assert vmi["status"]["interfaces"][0]["ipAddress"] == "10.0.2.15"
    warning = await node.wait_event("fallback", "NetworkFallback")
    assert warning[0] == "Warning" and "QEMU user networking" in warning[2]


async def test_metrics_report_each_running_vmis_domain_stats_under_kubevirts_names(
    node: Node, apiserver: APIServerProcess
) -> None:
    await node.run_vmi("measured")
    await node.run_vmi("other")
    await node.admin.patch(
        VIRTUAL_MACHINE_INSTANCES, "measured", {"metadata": {"labels": {"app": "web"}}}, node.namespace
    )

    url = f"http://{HANDLER_IP}:{node.handler.api.port}/metrics"
    # Kube's delegated auth: a token the API server accepts, of a user RBAC allows `get /metrics` (the admin).
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            assert response.status == 401
        handlers_own = {"Authorization": f"Bearer {apiserver.token_of(HANDLER_USER)}"}
        async with session.get(url, headers=handlers_own) as response:
            assert response.status == 403
            assert (await response.json())["reason"] == "Forbidden"

    async def scrape() -> dict[str, Any]:
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {apiserver.token()}"}) as session,
            session.get(url) as response,
        ):
            assert response.status == 200 and response.content_type == "text/plain"
            return {f.name: f for f in text_string_to_metric_families(await response.text())}

    async def labelled() -> dict[str, Any] | None:
        metrics = await scrape()
        cpu = metrics.get("kubevirt_vmi_cpu_usage_seconds")
        labels = [s.labels for s in cpu.samples] if cpu is not None else []
        return metrics if any(x.get("kubernetes_vmi_label_app") == "web" for x in labels) else None

    first = await eventually(labelled)
    assert [s.value for s in first["kubevirt_virt_handler_up"].samples] == [1.0]
    cpu = {s.labels["name"]: s for s in first["kubevirt_vmi_cpu_usage_seconds"].samples}
    assert set(cpu) == {"measured", "other"}
    assert {k: cpu["measured"].labels[k] for k in ("node", "namespace")} == {
        "node": node.name,
        "namespace": node.namespace,
    }
    for family in ("kubevirt_vmi_memory_domain_bytes", "kubevirt_vmi_memory_resident_bytes"):
        assert {s.labels["name"] for s in first[family].samples} == {"measured", "other"}, family
    # 64Mi of guest memory, as the VMI asks.
    domain = {s.labels["name"]: s.value for s in first["kubevirt_vmi_memory_domain_bytes"].samples}
    assert domain["measured"] == 64 * 1024 * 1024

    # The test driver's CPU time follows the wall clock while the domain runs.
    async def risen() -> bool:
        again = {s.labels["name"]: s.value for s in (await scrape())["kubevirt_vmi_cpu_usage_seconds"].samples}
        return again["measured"] > cpu["measured"].value

    await eventually(risen)
