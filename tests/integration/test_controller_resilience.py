"""virt-controller under failure: API server restarts, an unresponsive node, leader election between replicas."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from pykubevirt.client.informer import Object
from pykubevirt.client.resources import LEASES, NODES, PODS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, client_for, start_control_plane, vm_manifest
from tests.support.simulated_node import SimulatedNode
from tests.support.waiting import eventually


@pytest_asyncio.fixture
async def cp(fresh_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(fresh_apiserver)
    yield plane
    await plane.stop()


@pytest_asyncio.fixture
async def fast_failover(fresh_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    """A control plane that declares a node unresponsive after 2 s without a heartbeat."""
    plane = await start_control_plane(fresh_apiserver, heartbeat_timeout=2.0)
    yield plane
    await plane.stop()


async def test_controllers_converge_after_the_api_server_restarts(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    for i in range(5):
        await cp.admin.create(VIRTUAL_MACHINES, vm_manifest(f"vm{i}", "Always"), ns)
    # Kill the API server while the controller is mid-work (it made the first VMI), then bring it back on the same
    # data after an outage of a second (the outage's length, not a wait for anything).
    await eventually(lambda: cp.vmi(ns, "vm0"))
    cp.server.kill9()
    await asyncio.sleep(1.0)
    cp.server.start(port=cp.server.port)
    for i in range(5, 8):
        await eventually(lambda i=i: _create(cp, ns, f"vm{i}"))
    for i in range(8):
        await cp.wait_printable(ns, f"vm{i}", "Running", timeout=40)
    vmis = await cp.admin.list(VIRTUAL_MACHINE_INSTANCES, ns)
    assert sorted(v["metadata"]["name"] for v in vmis["items"]) == sorted(f"vm{i}" for i in range(8))
    pods = await cp.admin.list(PODS, ns, label_selector="kubevirt.io=virt-launcher")
    owners = [
        p["metadata"]["ownerReferences"][0]["uid"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp")
    ]
    assert len(owners) == len(set(owners)) == 8, "exactly one live launcher pod per VMI"


async def test_a_pod_whose_create_answer_was_lost_is_awaited_not_made_twice(
    cp: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod's create is stored but its answer lost, and the pod informer has not shown it yet (as while it re-lists
    after an API server restart): the VMI's next events must not make a second launcher pod."""
    ns = await cp.namespace()
    client = cp.controller.vmi_reconciler.client
    create = client.create
    lost: list[Object] = []

    async def answer_lost(resource: object, body: Object, namespace: str | None = None, **kw: object) -> Object:
        made = await create(resource, body, namespace, **kw)  # type: ignore[arg-type]
        if resource == PODS and not lost:
            lost.append(made)
            raise ConnectionError("POST pods: Server disconnected")
        return made

    pods = cp.controller.pods
    store, notify = pods._store, pods._notify
    held: list[Object] = []

    def hidden(obj: Object) -> bool:
        return bool(lost) and obj["metadata"]["name"] == lost[0]["metadata"]["name"]

    def held_store(obj: Object) -> tuple[Object | None, Object]:
        if hidden(obj):
            held.append(obj)
            return None, obj
        return store(obj)

    def held_notify(kind: str, obj: Object, old: Object | None = None) -> None:
        if not hidden(obj):
            notify(kind, obj, old)

    monkeypatch.setattr(client, "create", answer_lost)
    monkeypatch.setattr(pods, "_store", held_store)
    monkeypatch.setattr(pods, "_notify", held_notify)
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("lost", "Always"), ns)
    await eventually(lambda: bool(held))
    selector = "kubevirt.io=virt-launcher"

    async def launchers() -> int:
        return len((await cp.admin.list(PODS, ns, label_selector=selector))["items"])

    # Events of the VMI while the pod is still unseen: each is a reconcile that could make a second pod.
    for i in range(3):
        patch = {"metadata": {"labels": {"touched": str(i)}}}
        await cp.admin.patch(VIRTUAL_MACHINE_INSTANCES, "lost", patch, ns)
        await asyncio.sleep(0.5)
    assert await launchers() == 1
    # The informer catches up: the VMI goes on with the one pod.
    monkeypatch.setattr(pods, "_store", store)
    monkeypatch.setattr(pods, "_notify", notify)
    for obj in held:
        old, new = store(obj)
        notify("add" if old is None else "update", new, old)
    await cp.wait_printable(ns, "lost", "Running", timeout=40)
    assert await launchers() == 1


async def _create(cp: ControlPlane, ns: str, name: str) -> bool:
    try:
        await cp.admin.create(VIRTUAL_MACHINES, vm_manifest(name, "Always"), ns)
        return True
    except Exception:
        return False


async def test_unresponsive_node_fails_its_vmis_and_always_vms_move(fast_failover: ControlPlane) -> None:
    cp = fast_failover
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("mover", "Always"), ns)
    first = await cp.wait_vmi_phase(ns, "mover", "Running")
    assert first["status"]["nodeName"] == "node01"
    second = await SimulatedNode(cp.node_client, "node02", handler=cp.handler_client).start()
    try:
        # node01 dies: no more heartbeats, and its pods are gone with it.
        await cp.node.stop()
        cp.node.heartbeating = False
        for pod in (await cp.admin.list(PODS, ns))["items"]:
            await cp.admin.patch(
                PODS, pod["metadata"]["name"], {"status": {"phase": "Failed"}}, ns, subresource="status"
            )

        async def failed_unresponsive() -> bool:
            vmi = await cp.vmi(ns, "mover")
            if vmi is None or vmi["metadata"]["uid"] != first["metadata"]["uid"]:
                return True
            return vmi["status"].get("phase") == "Failed" and vmi["status"].get("reason") == "NodeUnresponsive"

        await eventually(failed_unresponsive, timeout=30)
        node = await cp.admin.get(NODES, "node01")
        assert node["metadata"]["labels"]["kubevirt.io/schedulable"] == "false"
        moved = await cp.wait_vmi_phase(ns, "mover", "Running", other_than_uid=first["metadata"]["uid"], timeout=40)
        assert moved["status"]["nodeName"] == "node02"
    finally:
        await second.stop()


async def test_out_of_service_taint_fails_vmis_at_once_and_force_deletes_their_pods(cp: ControlPlane) -> None:
    """Non-graceful node shutdown: the node's pods still look Running and its heartbeat is fresh (the default 60 s
    timeout is far away), yet the taint alone fails every VMI there and removes their launcher pods."""
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("always", "Always"), ns)
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("rerun", "RerunOnFailure"), ns)
    bare = {**vm_manifest("bare")["spec"]["template"], "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance"}
    bare["metadata"] = {"name": "bare"}
    await cp.admin.create(VIRTUAL_MACHINE_INSTANCES, bare, ns)
    first = {name: await cp.wait_vmi_phase(ns, name, "Running") for name in ("always", "rerun", "bare")}
    await cp.node.stop()  # partitioned: nothing reports the pods dead
    second = await SimulatedNode(cp.node_client, "node02", handler=cp.handler_client).start()
    try:
        taint = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
        await cp.admin.patch(NODES, "node01", {"spec": {"taints": [taint]}})
        for name in ("always", "rerun"):
            moved = await cp.wait_vmi_phase(
                ns, name, "Running", other_than_uid=first[name]["metadata"]["uid"], timeout=30
            )
            assert moved["status"]["nodeName"] == "node02"
        vmi = await cp.vmi(ns, "bare")
        assert vmi is not None and vmi["metadata"]["uid"] == first["bare"]["metadata"]["uid"]
        assert (vmi["status"]["phase"], vmi["status"].get("reason")) == ("Failed", "NodeUnresponsive")

        async def no_pods_left_on_node01() -> bool:
            pods = (await cp.admin.list(PODS, ns))["items"]
            return not [p for p in pods if p["spec"].get("nodeName") == "node01"]

        await eventually(no_pods_left_on_node01, timeout=10)
    finally:
        await second.stop()


def _controller_process(server: APIServerProcess, identity: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pykubevirt.cli.main",
            "virt-controller",
            "--kubeconfig",
            str(server.data_dir / "virt-controller.kubeconfig"),
            "--identity",
            identity,
            "--workers",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_two_replicas_elect_one_leader_and_sigterm_hands_over(fresh_apiserver: APIServerProcess) -> None:
    admin = client_for(fresh_apiserver)
    first = _controller_process(fresh_apiserver, "replica-a")
    second = _controller_process(fresh_apiserver, "replica-b")
    try:

        async def holder() -> str | None:
            try:
                lease = await admin.get(LEASES, "virt-controller", "kubevirt")
            except Exception:
                return None
            return lease["spec"].get("holderIdentity") or None

        leader = await eventually(holder, timeout=30)
        assert leader in ("replica-a", "replica-b")
        leading, standby = (first, second) if leader == "replica-a" else (second, first)
        os.kill(leading.pid, signal.SIGTERM)
        assert leading.wait(timeout=15) == 0, "SIGTERM stops the leader cleanly"

        async def new_leader() -> str | None:
            name = await holder()
            return name if name and name != leader else None

        # Released on shutdown, the lease passes over within a retry period instead of waiting for expiry.
        assert await eventually(new_leader, timeout=10) != leader
        assert standby.poll() is None
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
        await admin.close()
