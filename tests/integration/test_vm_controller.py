"""virt-controller against the embedded API server with a simulated node: KubeVirt's VM lifecycle semantics."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable

import pytest
import pytest_asyncio

from pykubevirt.api.constants import VM_CONTROLLER_FINALIZER
from pykubevirt.client.api import JSON_PATCH, STRATEGIC_MERGE_PATCH, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import (
    CONTROLLER_REVISIONS,
    EVENTS,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import (
    ControlPlane,
    printable_history,
    start_control_plane,
    status_ready_history,
    vm_manifest,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


async def create_vm(cp: ControlPlane, ns: str, name: str, strategy: str | None = "Always", **spec: object) -> dict:
    return await cp.admin.create(VIRTUAL_MACHINES, vm_manifest(name, strategy, **spec), ns)


async def set_state_change(cp: ControlPlane, ns: str, name: str, requests: list[dict]) -> None:
    await cp.admin.patch(
        VIRTUAL_MACHINES, name, {"status": {"stateChangeRequests": requests}}, ns, subresource="status"
    )


# ------------------------------------------------------------------------------------------------------ basics


async def test_vm_starts_and_vmi_is_built_from_the_template(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    vm = await create_vm(cp, ns, "basic")
    await cp.wait_printable(ns, "basic", "Running")
    vmi = await cp.vmi(ns, "basic")
    assert vmi is not None
    meta = vmi["metadata"]
    assert meta["labels"]["kubevirt.io/domain"] == "basic"
    assert "vm-label" not in meta["labels"], "the VM's own labels are not copied"
    assert meta["annotations"]["template-annotation"] == "on-template"
    assert "vm-annotation" not in meta["annotations"]
    assert meta["annotations"]["kubevirt.io/vm-generation"] == "1"
    owner = meta["ownerReferences"][0]
    assert owner == {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "name": "basic",
        "uid": vm["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert "kubevirt.io/virtualMachineControllerFinalize" in meta["finalizers"]
    assert "kubevirt.io/foregroundDeleteVirtualMachine" in meta["finalizers"]
    assert meta["labels"]["kubevirt.io/nodeName"] == cp.node.name
    assert vmi["status"]["nodeName"] == cp.node.name
    assert vmi["spec"]["domain"]["firmware"]["uuid"]
    revision_name = vmi["status"]["virtualMachineRevisionName"]
    assert revision_name == f"revision-start-vm-{vm['metadata']['uid']}-1"
    revision = await cp.admin.get(CONTROLLER_REVISIONS, revision_name, ns)
    assert revision["data"]["spec"]["runStrategy"] == "Always"

    current = await cp.vm(ns, "basic")
    assert current is not None
    status = current["status"]
    assert status["created"] is True and status["ready"] is True
    assert status["observedGeneration"] == status["desiredGeneration"] == 1
    assert status["runStrategy"] == "Always"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert "kubevirt.io/virtualMachineControllerFinalize" in current["metadata"]["finalizers"]
    await cp.controller.recorder.flush()
    events = await cp.admin.list(
        EVENTS, ns, field_selector="involvedObject.name=basic,involvedObject.kind=VirtualMachine"
    )
    reasons = {e["reason"]: e["message"] for e in events["items"]}
    assert (
        reasons["SuccessfulCreate"] == "Started the virtual machine by creating the new virtual machine instance basic"
    )


async def test_launcher_pod_is_rendered_and_handed_over(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "podvm")
    vmi = await cp.wait_vmi_phase(ns, "podvm", "Running")
    pods = await cp.admin.list(PODS, ns, label_selector=f"kubevirt.io/created-by={vmi['metadata']['uid']}")
    (pod,) = pods["items"]
    assert pod["metadata"]["name"].startswith("virt-launcher-podvm-")
    labels = pod["metadata"]["labels"]
    assert labels["kubevirt.io"] == "virt-launcher"
    assert labels["vm.kubevirt.io/name"] == "podvm"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60
    assert pod["spec"]["readinessGates"] == [{"conditionType": "kubevirt.io/virtual-machine-unpaused"}]
    assert pod["spec"]["nodeSelector"]["kubevirt.io/schedulable"] == "true"
    compute = pod["spec"]["containers"][0]
    assert compute["name"] == "compute"
    assert compute["resources"]["requests"]["cpu"] == "100m"
    assert vmi["status"]["activePods"] == {pod["metadata"]["uid"]: cp.node.name}
    assert vmi["status"]["qosClass"] == "Burstable"
    gate = next(c for c in pod["status"]["conditions"] if c["type"] == "kubevirt.io/virtual-machine-unpaused")
    assert gate["status"] == "True" and gate["reason"] == "NotPaused"


async def test_unpaused_gate_keeps_pod_conditions_the_controller_has_not_seen(
    cp: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate is merged into the pod's conditions by type: another writer's condition, unseen, is never lost."""
    ns = await cp.namespace()
    await create_vm(cp, ns, "gated")
    vmi = await cp.wait_vmi_phase(ns, "gated", "Running")
    (pod,) = (await cp.admin.list(PODS, ns, label_selector=f"kubevirt.io/created-by={vmi['metadata']['uid']}"))["items"]
    name = pod["metadata"]["name"]
    informer = cp.controller.pods
    store = informer._store
    held = f"{ns}/{name}"

    def hold_back(obj: Object) -> tuple[Object | None, Object]:
        # The controller's pod cache stays as it was while another writer adds a condition.
        cached = informer.get(held)
        if cached is not None and f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}" == held:
            return cached, cached
        return store(obj)

    client = cp.controller.vmi_reconciler.client
    patch = client.patch
    gate_writes: list[str] = []

    async def spy(resource: object, target: str, body: object, namespace: str | None = None, **kw: object) -> Object:
        if resource == PODS and target == name and kw.get("subresource") == "status":
            gate_writes.append(target)
        return await patch(resource, target, body, namespace, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(informer, "_store", hold_back)
    monkeypatch.setattr(client, "patch", spy)
    other = {"type": "example.com/other", "status": "True"}
    await cp.admin.patch(
        PODS, name, {"status": {"conditions": [other]}}, ns, patch_type=STRATEGIC_MERGE_PATCH, subresource="status"
    )
    await cp.node.set_paused(f"{ns}/gated", True)
    await eventually(lambda: gate_writes)
    current = await cp.admin.get(PODS, name, ns)
    assert other in current["status"]["conditions"], "the gate write dropped a condition it had not seen"

    # Once the cache catches up, the gate follows the pause and the other writer's condition stays.
    monkeypatch.setattr(informer, "_store", store)
    second = {"type": "example.com/second", "status": "True"}
    await cp.admin.patch(
        PODS, name, {"status": {"conditions": [second]}}, ns, patch_type=STRATEGIC_MERGE_PATCH, subresource="status"
    )

    async def gate_closed() -> Object | None:
        pod = await cp.admin.get(PODS, name, ns)
        conditions = pod["status"]["conditions"]
        gate = next(c for c in conditions if c["type"] == "kubevirt.io/virtual-machine-unpaused")
        return pod if gate["status"] == "False" else None

    pod = await eventually(gate_closed)
    assert other in pod["status"]["conditions"] and second in pod["status"]["conditions"]


async def test_paused_vmi_is_not_ready_and_vm_shows_paused(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "pausing")
    await cp.wait_printable(ns, "pausing", "Running")
    await cp.node.set_paused(f"{ns}/pausing", True)
    await cp.wait_printable(ns, "pausing", "Paused")

    async def not_ready() -> bool:
        vmi = await cp.vmi(ns, "pausing")
        return any(
            c["type"] == "Ready" and c["status"] == "False" for c in (vmi or {}).get("status", {}).get("conditions", [])
        )

    await eventually(not_ready)

    async def vm_mirrors_it() -> bool:
        # The VM controller copies the VMI's readiness and Paused condition on its own next sync.
        vm = await cp.vm(ns, "pausing")
        status = (vm or {}).get("status") or {}
        paused = any(c["type"] == "Paused" and c["status"] == "True" for c in status.get("conditions") or [])
        return status.get("ready") is False and paused

    await eventually(vm_mirrors_it)
    await cp.node.set_paused(f"{ns}/pausing", False)
    await cp.wait_printable(ns, "pausing", "Running")


# ------------------------------------------------------------------------------------------------------ run strategies


@pytest.mark.parametrize(
    ("strategy", "outcome", "restarted"),
    [
        ("Always", "Succeeded", True),
        ("Always", "Failed", True),
        ("RerunOnFailure", "Failed", True),
        ("RerunOnFailure", "Succeeded", False),
        ("Manual", "Succeeded", False),
        ("Manual", "Failed", False),
        ("Once", "Succeeded", False),
        ("Once", "Failed", False),
    ],
)
async def test_run_strategy_after_the_vmi_finishes(
    cp: ControlPlane, strategy: str, outcome: str, restarted: bool
) -> None:
    ns = await cp.namespace()
    if strategy == "Manual":
        await create_vm(cp, ns, "rs", strategy)
        await set_state_change(cp, ns, "rs", [{"action": "Start"}])
    else:
        await create_vm(cp, ns, "rs", strategy)
    first = await cp.wait_vmi_phase(ns, "rs", "Running")
    await cp.wait_printable(ns, "rs", "Running")
    # A VMI that reached Running does not count as a crash: no backoff on the restart.
    await cp.node.set_phase(f"{ns}/rs", outcome)
    if restarted:
        second = await cp.wait_vmi_phase(ns, "rs", "Running", other_than_uid=first["metadata"]["uid"])
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        await cp.wait_printable(ns, "rs", "Running")
    elif strategy in ("Manual", "Once"):
        # The final VMI is kept and the VM reports Stopped.
        await cp.wait_printable(ns, "rs", "Stopped")
        vmi = await cp.vmi(ns, "rs")
        assert vmi is not None and vmi["metadata"]["uid"] == first["metadata"]["uid"]
        assert vmi["status"]["phase"] == outcome

        async def released() -> bool:
            # The VM controller lets go of the final VMI right after writing Stopped (its sync's last step).
            vmi = await cp.vmi(ns, "rs")
            return vmi is not None and VM_CONTROLLER_FINALIZER not in vmi["metadata"].get("finalizers", [])

        await eventually(released)
    else:
        # RerunOnFailure after a clean shutdown: the VMI is removed and the VM stays stopped.
        await cp.wait_vmi_gone(ns, "rs", first["metadata"]["uid"])
        await cp.wait_printable(ns, "rs", "Stopped")
        assert await cp.vmi(ns, "rs") is None


async def test_halted_vm_does_not_start_and_start_request_switches_to_always(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "halted", "Halted")
    await cp.wait_printable(ns, "halted", "Stopped")
    assert await cp.vmi(ns, "halted") is None
    await set_state_change(cp, ns, "halted", [{"action": "Start", "data": {"paused": "true"}}])
    vmi = await cp.wait_vmi_phase(ns, "halted", "Running")
    assert vmi["spec"]["startStrategy"] == "Paused"
    vm = await cp.vm(ns, "halted")
    assert vm is not None and vm["spec"]["runStrategy"] == "Always"


async def test_running_true_behaves_as_always_and_false_stops(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "legacy", None, running=True)
    await cp.wait_printable(ns, "legacy", "Running")
    vmi = await cp.vmi(ns, "legacy")
    assert vmi is not None
    await cp.admin.patch(VIRTUAL_MACHINES, "legacy", {"spec": {"running": False}}, ns)
    await cp.wait_vmi_gone(ns, "legacy", vmi["metadata"]["uid"])
    await cp.wait_printable(ns, "legacy", "Stopped")


async def test_always_to_halted_stops_and_back_starts(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "cycle")
    for _ in range(2):
        vmi = await cp.wait_vmi_phase(ns, "cycle", "Running")
        await cp.admin.patch(VIRTUAL_MACHINES, "cycle", {"spec": {"runStrategy": "Halted"}}, ns)
        await cp.wait_vmi_gone(ns, "cycle", vmi["metadata"]["uid"])
        await cp.wait_printable(ns, "cycle", "Stopped")
        await cp.admin.patch(VIRTUAL_MACHINES, "cycle", {"spec": {"runStrategy": "Always"}}, ns)
    await cp.wait_printable(ns, "cycle", "Running")


async def stop_and_wait_stopped(cp: ControlPlane, ns: str, name: str, uid: str) -> None:
    await cp.admin.patch(VIRTUAL_MACHINES, name, {"spec": {"runStrategy": "Halted"}}, ns)
    await cp.wait_vmi_gone(ns, name, uid)
    await cp.wait_printable(ns, name, "Stopped")


async def test_a_stop_while_running_waits_for_the_vmi_readiness_shows_stopping(
    cp: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop right after the VM shows Running, before virt-controller has copied the pod's readiness onto the VMI.

    The VM's Running waits (up to a second) for that copy, to go out in one write with it. A Stopping held the same
    way was overtaken by the VMI's end and never written: the watch went Running → Stopped (stress run on f77ce6c).
    Here the readiness copy stays late and the controller's hold clock stands still, so what is held stays held.
    """
    ns = await cp.namespace()
    key = f"{ns}/late-ready"
    reconciler = cp.controller.vmi_reconciler
    reconcile = reconciler.reconcile

    async def late_readiness(k: str) -> object:
        vmi = cp.controller.vmis.get(k)
        if k == key and vmi is not None and (vmi.get("status") or {}).get("phase") == "Running":
            return None  # virt-controller has not got to this VMI since it turned Running
        return await reconcile(k)

    monkeypatch.setattr(reconciler, "reconcile", late_readiness)
    async with printable_history(cp.admin, ns, "late-ready") as seen:
        await create_vm(cp, ns, "late-ready")
        await cp.wait_printable(ns, "late-ready", "Running")
        vmi = await cp.vmi(ns, "late-ready")
        assert vmi is not None
        ready = next(x for x in vmi["status"]["conditions"] if x["type"] == "Ready")
        assert ready["reason"] == "GuestNotRunning", "the readiness copy was meant to be late"
        frozen = time.monotonic()
        monkeypatch.setattr(cp.controller.vm_reconciler.held_observable, "clock", lambda: frozen)
        await stop_and_wait_stopped(cp, ns, "late-ready", vmi["metadata"]["uid"])
        await eventually(lambda: seen[-1:] == ["Stopped"])  # the watch may trail the GET
    assert seen == ["Starting", "Running", "Stopping", "Stopped"], seen


async def test_a_stopping_vm_is_not_ready_while_its_launcher_pod_terminates(cp: ControlPlane) -> None:
    """A launcher pod marked for deletion counts as deleted for the VMI's expectations (KubeVirt's updatePod).

    So the VMI controller follows the pod while it terminates: the VMI's Ready goes False (PodTerminating) before
    the guest is down, and the VM shows Stopping, not ready. Waiting for the pod to be gone instead left the VMI
    Ready until its last write, and `kubectl get vm -w` showed `Stopped True` on the way.
    """
    ns = await cp.namespace()
    name = "pod-going"
    async with status_ready_history(cp.admin, ns, name) as rows:
        await create_vm(cp, ns, name)
        vmi = await cp.wait_vmi_phase(ns, name, "Running")
        await eventually(lambda: rows[-1:] == [("Running", True)])
        cp.node.auto_run = False  # the guest shuts down slowly: the pod stays terminating until it is told
        try:
            await cp.admin.patch(VIRTUAL_MACHINES, name, {"spec": {"runStrategy": "Halted"}}, ns)

            async def not_ready_while_terminating() -> bool:
                current = await cp.vmi(ns, name)
                pods = (await cp.admin.list(PODS, ns))["items"]
                if current is None or not pods or not pods[0]["metadata"].get("deletionTimestamp"):
                    return False
                ready = next(x for x in current["status"]["conditions"] if x["type"] == "Ready")
                running = current["status"]["phase"] == "Running"
                return running and ready["status"] == "False" and ready["reason"] == "PodTerminating"

            await eventually(not_ready_while_terminating)
            await eventually(lambda: rows[-1:] == [("Stopping", False)])
            await cp.node.set_phase(f"{ns}/{name}", "Succeeded")
        finally:
            cp.node.auto_run = True
            cp.node.resync()
        await cp.wait_vmi_gone(ns, name, vmi["metadata"]["uid"])
        await cp.wait_printable(ns, name, "Stopped")
        await eventually(lambda: rows[-1:] == [("Stopped", False)])
    assert ("Stopped", True) not in rows, rows
    assert rows[:2] == [("Starting", False), ("Running", True)], rows
    events = (await cp.admin.list(EVENTS, ns))["items"]
    deleted = [
        e
        for e in events
        if e["reason"] == "SuccessfulDelete" and e["involvedObject"]["kind"] == "VirtualMachineInstance"
    ]
    assert [e.get("count", 1) for e in deleted] == [1], "the pod's deletion is announced once"


async def test_a_stop_whose_answer_comes_after_the_vmi_ended_shows_stopping(
    cp: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The VMI informer may hear of the delete before its answer comes back, settling the deletion expectation.

    The controller then computed the VM's status from the cached VMI as it was before the delete (Running, nothing
    to write), and by its next look the VMI had ended: Running → Stopped. Here the delete's answer is held back
    until the VMI has ended (the simulated node ends a deleted VMI at once).
    """
    ns = await cp.namespace()
    await create_vm(cp, ns, "late-answer")
    vmi = await cp.wait_vmi_phase(ns, "late-answer", "Running")
    await cp.wait_printable(ns, "late-answer", "Running")
    key = f"{ns}/late-answer"
    client = cp.controller.vm_reconciler.client
    delete = client.delete

    async def late_answer(resource: object, name: str, namespace: str | None = None, **kw: object) -> Object:
        answer = await delete(resource, name, namespace, **kw)  # type: ignore[arg-type]
        if resource == VIRTUAL_MACHINE_INSTANCES and f"{namespace}/{name}" == key:

            def ended() -> bool:
                cached = cp.controller.vmis.get(key)
                return cached is None or (cached.get("status") or {}).get("phase") == "Succeeded"

            await eventually(ended)
        return answer

    monkeypatch.setattr(client, "delete", late_answer)
    async with printable_history(cp.admin, ns, "late-answer") as seen:
        await stop_and_wait_stopped(cp, ns, "late-answer", vmi["metadata"]["uid"])
        await eventually(lambda: seen[-1:] == ["Stopped"])  # the watch may trail the GET
    assert seen == ["Running", "Stopping", "Stopped"], seen


async def test_restart_request_replaces_the_vmi(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "restart", "Manual")
    await set_state_change(cp, ns, "restart", [{"action": "Start"}])
    first = await cp.wait_vmi_phase(ns, "restart", "Running")
    await set_state_change(
        cp, ns, "restart", [{"action": "Stop", "uid": first["metadata"]["uid"]}, {"action": "Start"}]
    )
    second = await cp.wait_vmi_phase(ns, "restart", "Running", other_than_uid=first["metadata"]["uid"])
    assert second["metadata"]["uid"] != first["metadata"]["uid"]

    async def requests_trimmed() -> bool:
        vm = await cp.vm(ns, "restart")
        return not (vm or {}).get("status", {}).get("stateChangeRequests")

    await eventually(requests_trimmed)


async def test_manual_stop_request_stops(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "manual", "Manual")
    await cp.wait_printable(ns, "manual", "Stopped")
    await set_state_change(cp, ns, "manual", [{"action": "Start"}])
    vmi = await cp.wait_vmi_phase(ns, "manual", "Running")
    await set_state_change(cp, ns, "manual", [{"action": "Stop", "uid": vmi["metadata"]["uid"]}])
    await cp.wait_vmi_gone(ns, "manual", vmi["metadata"]["uid"])
    await cp.wait_printable(ns, "manual", "Stopped")


async def test_rerun_on_failure_records_a_start_request_after_failure(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "rerun", "RerunOnFailure")
    first = await cp.wait_vmi_phase(ns, "rerun", "Running")
    await cp.node.set_phase(f"{ns}/rerun", "Failed")
    await cp.wait_vmi_phase(ns, "rerun", "Running", other_than_uid=first["metadata"]["uid"])


# ------------------------------------------------------------------------------------------------------ deletion


async def test_vmi_recreated_after_deletion_and_after_pod_deletion(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "recreate")
    first = await cp.wait_vmi_phase(ns, "recreate", "Running")
    await cp.admin.delete(VIRTUAL_MACHINE_INSTANCES, "recreate", ns)
    second = await cp.wait_vmi_phase(ns, "recreate", "Running", other_than_uid=first["metadata"]["uid"])
    pods = await cp.admin.list(PODS, ns, label_selector=f"kubevirt.io/created-by={second['metadata']['uid']}")
    (pod,) = pods["items"]
    await cp.admin.delete(PODS, pod["metadata"]["name"], ns)
    third = await cp.wait_vmi_phase(ns, "recreate", "Running", other_than_uid=second["metadata"]["uid"])
    assert third["metadata"]["uid"] not in (first["metadata"]["uid"], second["metadata"]["uid"])


async def test_deleting_the_vm_removes_vmi_pod_and_finalizers(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "gone")
    vmi = await cp.wait_vmi_phase(ns, "gone", "Running")
    await cp.admin.delete(VIRTUAL_MACHINES, "gone", ns, propagation_policy="Background")

    async def all_gone() -> bool:
        pods = await cp.admin.list(PODS, ns, label_selector=f"kubevirt.io/created-by={vmi['metadata']['uid']}")
        return await cp.vm(ns, "gone") is None and await cp.vmi(ns, "gone") is None and not pods["items"]

    await eventually(all_gone)


async def test_orphan_delete_keeps_the_vmi(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "orphan")
    vmi = await cp.wait_vmi_phase(ns, "orphan", "Running")
    await cp.admin.delete(VIRTUAL_MACHINES, "orphan", ns, propagation_policy="Orphan")

    async def vm_gone() -> bool:
        return await cp.vm(ns, "orphan") is None

    await eventually(vm_gone)
    kept = await cp.vmi(ns, "orphan")
    assert kept is not None and kept["metadata"]["uid"] == vmi["metadata"]["uid"]

    async def released() -> bool:
        current = await cp.vmi(ns, "orphan")
        return current is not None and not current["metadata"].get("ownerReferences")

    await eventually(released)


async def test_orphan_delete_keeps_the_vmi_while_the_controller_cache_is_stale(
    cp: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Orphan delete races: the VM loses its `orphan` finalizer before the VMI informer hears of the release."""
    ns = await cp.namespace()
    await create_vm(cp, ns, "stale")
    vmi = await cp.wait_vmi_phase(ns, "stale", "Running")
    informer = cp.controller.vmis
    store = informer._store
    held = f"{ns}/stale"

    def hold_back(obj: Object) -> tuple[Object | None, Object]:
        # The controller's cache keeps the VMI as it was (still owned by the VM) while the API server moves on.
        cached = informer.get(held)
        if cached is not None and f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}" == held:
            return cached, cached
        return store(obj)

    monkeypatch.setattr(informer, "_store", hold_back)
    await cp.admin.delete(VIRTUAL_MACHINES, "stale", ns, propagation_policy="Orphan")

    async def vm_gone() -> bool:
        return await cp.vm(ns, "stale") is None

    await eventually(vm_gone)
    cached = informer.get(held)
    assert cached is not None and cached["metadata"]["ownerReferences"], "the cache was meant to be stale"
    kept = await cp.vmi(ns, "stale")
    assert kept is not None and kept["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert not kept["metadata"].get("deletionTimestamp")
    assert not kept["metadata"].get("ownerReferences")


async def test_terminating_vm_shows_terminating_then_disappears(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "term")
    await cp.wait_vmi_phase(ns, "term", "Running")
    cp.node.auto_run = False
    try:
        await cp.admin.delete(VIRTUAL_MACHINES, "term", ns)
        await cp.wait_printable(ns, "term", "Terminating")
        await cp.node.set_phase(f"{ns}/term", "Succeeded")
    finally:
        cp.node.auto_run = True
        cp.node.resync()

    async def gone() -> bool:
        return await cp.vm(ns, "term") is None

    await eventually(gone)


# ------------------------------------------------------------------------------------------------------ template edits


async def test_template_edit_does_not_touch_running_vmi_and_sets_restart_required(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "edit")
    vmi = await cp.wait_vmi_phase(ns, "edit", "Running")
    patch = [{"op": "replace", "path": "/spec/template/spec/domain/memory/guest", "value": "256Mi"}]
    await cp.admin.patch(VIRTUAL_MACHINES, "edit", patch, ns, patch_type=JSON_PATCH)

    async def restart_required() -> bool:
        vm = await cp.vm(ns, "edit")
        return any(
            c["type"] == "RestartRequired" and c["status"] == "True"
            for c in (vm or {}).get("status", {}).get("conditions", [])
        )

    await eventually(restart_required)
    same = await cp.vmi(ns, "edit")
    assert same is not None and same["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert same["spec"]["domain"]["memory"]["guest"] == "128Mi"
    vm = await cp.vm(ns, "edit")
    assert vm is not None and vm["status"]["desiredGeneration"] == 2 and vm["status"]["observedGeneration"] == 1


async def test_label_only_change_bumps_the_vmi_generation_annotation(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "gen")
    await cp.wait_vmi_phase(ns, "gen", "Running")
    await cp.admin.patch(VIRTUAL_MACHINES, "gen", {"spec": {"dataVolumeTemplates": []}}, ns)

    async def bumped() -> bool:
        vm = await cp.vm(ns, "gen")
        status = (vm or {}).get("status", {})
        return status.get("desiredGeneration") == 2 and status.get("observedGeneration") == 2

    await eventually(bumped)


# ------------------------------------------------------------------------------------------------------ errors


async def test_crash_loop_backoff(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    cp.node.auto_run = False
    try:
        await create_vm(cp, ns, "crashy")
        first = await cp.wait_vmi_phase(ns, "crashy", "Scheduled")
        # Failing before ever reaching Running counts as a start failure.
        await cp.node.set_phase(f"{ns}/crashy", "Failed")
        await cp.wait_printable(ns, "crashy", "CrashLoopBackOff")
        vm = await cp.vm(ns, "crashy")
        assert vm is not None
        failure = vm["status"]["startFailure"]
        assert failure["consecutiveFailCount"] == 1
        assert failure["lastFailedVMIUID"] == first["metadata"]["uid"]
        assert failure["retryAfterTimestamp"]
    finally:
        cp.node.auto_run = True


async def test_unschedulable_and_image_pull_errors_show_on_the_vm(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    cp.node.unschedulable_message = "0/1 nodes are available: 1 Insufficient memory."
    try:
        await create_vm(cp, ns, "nofit")
        await cp.wait_printable(ns, "nofit", "ErrorUnschedulable")
    finally:
        cp.node.unschedulable_message = ""
    await cp.admin.delete(VIRTUAL_MACHINES, "nofit", ns)

    ns2 = await cp.namespace()
    vm = vm_manifest("pullfail", "Always")
    original_react = cp.node._react_pod

    async def failing(key: str) -> None:
        pod = cp.node.pods.get(key)
        if pod is not None and key.startswith(f"{ns2}/"):
            cp.node.image_errors[pod["metadata"]["name"]] = "ErrImagePull"
        await original_react(key)

    cp.node._react_pod = failing  # type: ignore[method-assign]
    try:
        await cp.admin.create(VIRTUAL_MACHINES, vm, ns2)
        await cp.wait_printable(ns2, "pullfail", "ErrImagePull")
        vmi = await cp.vmi(ns2, "pullfail")
        assert vmi is not None
        sync = next(c for c in vmi["status"]["conditions"] if c["type"] == "Synchronized")
        assert sync["status"] == "False" and sync["reason"] == "ErrImagePull"
    finally:
        cp.node._react_pod = original_react  # type: ignore[method-assign]


async def test_both_running_and_run_strategy_is_a_sync_failure_on_existing_objects(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "both", "Halted")
    await cp.wait_printable(ns, "both", "Stopped")
    vm = await cp.vm(ns, "both")
    assert vm is not None
    # Admission refuses the combination, so only a stored object from elsewhere could carry it; check the message.
    with pytest.raises(Exception) as info:
        await cp.admin.patch(VIRTUAL_MACHINES, "both", {"spec": {"running": True}}, ns)
    assert "Running and RunStrategy are mutually exclusive" in str(info.value)


async def test_vm_without_vmi_has_ready_false_condition(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await create_vm(cp, ns, "idle", "Halted")

    async def condition() -> dict | None:
        vm = await cp.vm(ns, "idle")
        return next((c for c in (vm or {}).get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)

    ready = await eventually(condition)
    assert ready["status"] == "False"
    assert ready["reason"] == "VMINotExists"
    assert ready["message"] == "VMI does not exist"
    with pytest.raises(NotFound):
        await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "idle", ns)


# ------------------------------------------------------------------------------------------------------ instancetypes


async def test_instancetype_and_preference_are_snapshotted_and_applied(cp: ControlPlane) -> None:
    from pykubevirt.client.resources import CLUSTER_INSTANCETYPES, CLUSTER_PREFERENCES

    ns = await cp.namespace()
    suffix = ns[2:]
    it_name, pref_name = f"standard-{suffix}", f"fedora-{suffix}"
    await cp.admin.create(
        CLUSTER_INSTANCETYPES,
        {
            "apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachineClusterInstancetype",
            "metadata": {"name": it_name},
            "spec": {"cpu": {"guest": 2}, "memory": {"guest": "256Mi"}},
        },
    )
    await cp.admin.create(
        CLUSTER_PREFERENCES,
        {
            "apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachineClusterPreference",
            "metadata": {"name": pref_name},
            "spec": {"devices": {"preferredDiskBus": "virtio"}, "cpu": {"preferredCPUTopology": "cores"}},
        },
    )
    body = vm_manifest("typed", "Always", instancetype={"name": it_name}, preference={"name": pref_name})
    del body["spec"]["template"]["spec"]["domain"]["memory"]
    body["spec"]["template"]["spec"]["domain"]["devices"]["disks"] = [{"name": "root"}]
    await cp.admin.create(VIRTUAL_MACHINES, body, ns)
    vmi = await cp.wait_vmi_phase(ns, "typed", "Running")
    domain = vmi["spec"]["domain"]
    assert domain["cpu"]["cores"] == 2 and domain["cpu"]["sockets"] == 1
    assert domain["memory"]["guest"] == "256Mi"
    assert domain["devices"]["disks"][0]["disk"]["bus"] == "virtio"
    assert vmi["metadata"]["annotations"]["kubevirt.io/cluster-instancetype-name"] == it_name
    assert vmi["metadata"]["annotations"]["kubevirt.io/cluster-preference-name"] == pref_name
    vm = await cp.vm(ns, "typed")
    assert vm is not None
    ref = vm["status"]["instancetypeRef"]
    assert ref["name"] == it_name and ref["kind"] == "VirtualMachineClusterInstancetype"
    revision = await cp.admin.get(CONTROLLER_REVISIONS, ref["controllerRevisionRef"]["name"], ns)
    assert revision["metadata"]["labels"]["instancetype.kubevirt.io/object-name"] == it_name
    assert revision["data"]["spec"]["cpu"]["guest"] == 2
    assert vm["status"]["preferenceRef"]["controllerRevisionRef"]["name"].startswith(f"typed-{pref_name}-v1beta1-")
    # Later edits of the instancetype do not change the VM: it keeps its snapshot.
    it = await cp.admin.get(CLUSTER_INSTANCETYPES, it_name)
    it["spec"]["memory"]["guest"] = "512Mi"
    await cp.admin.update(CLUSTER_INSTANCETYPES, it)
    await cp.admin.delete(VIRTUAL_MACHINE_INSTANCES, "typed", ns)
    again = await cp.wait_vmi_phase(ns, "typed", "Running", other_than_uid=vmi["metadata"]["uid"])
    assert again["spec"]["domain"]["memory"]["guest"] == "256Mi"


async def test_missing_instancetype_is_a_failure_condition(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    body = vm_manifest("notype", "Always", instancetype={"name": "does-not-exist"})
    del body["spec"]["template"]["spec"]["domain"]["memory"]
    await cp.admin.create(VIRTUAL_MACHINES, body, ns)

    async def failure() -> dict | None:
        vm = await cp.vm(ns, "notype")
        return next((c for c in (vm or {}).get("status", {}).get("conditions", []) if c["type"] == "Failure"), None)

    condition = await eventually(failure)
    assert condition["reason"] == "FailedFindInstancetype"
    assert (
        'virtualmachineclusterinstancetypes.instancetype.kubevirt.io "does-not-exist" not found' in condition["message"]
    )
    assert await cp.vmi(ns, "notype") is None


# ------------------------------------------------------------------------------------------------------ data volumes


async def test_data_volume_templates_are_created_and_waited_for(cp: ControlPlane) -> None:
    from pykubevirt.client.resources import DATA_VOLUMES

    ns = await cp.namespace()
    body = vm_manifest("withdv", "Always")
    body["spec"]["dataVolumeTemplates"] = [
        {
            "metadata": {"name": "withdv-root"},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
        }
    ]
    body["spec"]["template"]["spec"]["volumes"] = [{"name": "root", "dataVolume": {"name": "withdv-root"}}]
    vm = await cp.admin.create(VIRTUAL_MACHINES, body, ns)

    async def created() -> dict | None:
        try:
            return await cp.admin.get(DATA_VOLUMES, "withdv-root", ns)
        except NotFound:
            return None

    dv = await eventually(created)
    assert dv["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
    await cp.wait_printable(ns, "withdv", "Provisioning")
    assert await cp.vmi(ns, "withdv") is None
    # What CDI does: the DV's claim, populated, then the DV Succeeded.
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "withdv-root"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
    await cp.admin.patch(
        DATA_VOLUMES, "withdv-root", {"status": {"phase": "Succeeded", "progress": "100.0%"}}, ns, subresource="status"
    )
    await cp.wait_vmi_phase(ns, "withdv", "Running")
    await cp.wait_printable(ns, "withdv", "Running")


async def test_a_template_cloning_a_golden_image_of_another_namespace_needs_the_vms_service_account_right(
    cp: ControlPlane,
) -> None:
    """KubeVirt resolves a template's DataSource into the source it names, and asks whether the VM's service account
    may clone from there (CDI's clone-sourcer role, bound in the golden namespace, grants it)."""
    from pykubevirt.client.resources import DATA_SOURCES, DATA_VOLUMES

    ns, golden = await cp.namespace(), await cp.namespace()
    source = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": {"name": "fedora"}}
    source["spec"] = {"source": {"pvc": {"name": "fedora-disk"}}}
    await cp.admin.create(DATA_SOURCES, source, golden)

    def vm_cloning(name: str, data_source: str) -> dict:
        body = vm_manifest(name, "Halted")
        ref = {"kind": "DataSource", "name": data_source, "namespace": golden}
        body["spec"]["dataVolumeTemplates"] = [
            {
                "metadata": {"name": f"{name}-root"},
                "spec": {"sourceRef": ref, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
            }
        ]
        body["spec"]["template"]["spec"]["volumes"] = [{"name": "root", "dataVolume": {"name": f"{name}-root"}}]
        return body

    async def failure(name: str) -> dict | None:
        vm = await cp.vm(ns, name)
        return next((c for c in (vm or {}).get("status", {}).get("conditions", []) if c["type"] == "Failure"), None)

    await cp.admin.create(VIRTUAL_MACHINES, vm_cloning("nosource", "nothing"), ns)
    missing = await eventually(lambda: failure("nosource"))
    assert (missing["reason"], missing["message"]) == (
        "FailedCreate",
        "Error encountered while creating DataVolumes: unable to create DataVolume manifest: "
        'datasources.cdi.kubevirt.io "nothing" not found',
    )

    await cp.admin.create(VIRTUAL_MACHINES, vm_cloning("golden", "fedora"), ns)
    reason = f"User system:serviceaccount:{ns}:default has insufficient permissions in clone source namespace {golden}"
    refused = await eventually(lambda: failure("golden"))
    assert (
        refused["message"]
        == f"Error encountered while creating DataVolumes: not authorized to create DataVolume: {reason}"
    )

    async def vm_events() -> set[tuple[str, str]]:
        items = (await cp.admin.list(EVENTS, ns, field_selector="involvedObject.name=golden"))["items"]
        return {(e["reason"], e["message"]) for e in items}

    expected = {
        ("UnauthorizedDataVolumeCreate", f"Not authorized to create DataVolume golden-root: {reason}"),
        (
            "SourcePVCNotAvailabe",
            "Source PVC fedora-disk not available: Target PVC golden-root will remain unpopulated until source is "
            "created",
        ),
    }
    await eventually(lambda: _contains(vm_events(), expected))

    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "vms-clone"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cdi.kubevirt.io:clone-sourcer",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }
    await cp.admin.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{golden}/rolebindings", body=binding)

    async def created() -> dict | None:
        try:
            return await cp.admin.get(DATA_VOLUMES, "golden-root", ns)
        except NotFound:
            return None

    dv = await eventually(created)
    # The DataSource resolved: the DataVolume names the claim it clones, in its namespace.
    assert "sourceRef" not in dv["spec"]
    assert dv["spec"]["source"] == {"pvc": {"name": "fedora-disk", "namespace": golden}}


async def _contains(found: Awaitable[set[tuple[str, str]]], expected: set[tuple[str, str]]) -> bool:
    return expected <= await found


async def test_a_missing_claim_holds_the_launcher_pod_until_it_appears(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    body = vm_manifest("claimed", "Always")
    body["spec"]["template"]["spec"]["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": "later"}}]
    await cp.admin.create(VIRTUAL_MACHINES, body, ns)

    async def waiting_event() -> bool:
        items = (await cp.admin.list(EVENTS, ns, field_selector="involvedObject.name=claimed"))["items"]
        return any(
            e.get("reason") == "FailedPvcNotFound"
            and e.get("message") == f"PVC {ns}/later does not exist, waiting for it to appear"
            for e in items
        )

    await eventually(waiting_event)
    assert not (await cp.admin.list(PODS, ns))["items"]
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "later"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
    vmi = await cp.wait_vmi_phase(ns, "claimed", "Running")
    (status,) = vmi["status"]["volumeStatus"]
    assert status["persistentVolumeClaimInfo"] == {
        "claimName": "later",
        "accessModes": ["ReadWriteMany"],
        "volumeMode": "Filesystem",
        "requests": {"storage": "1Gi"},
        "filesystemOverhead": "0.055",
    }
    (pod,) = (await cp.admin.list(PODS, ns))["items"]
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    assert {"name": "root", "mountPath": "/var/run/kubevirt-private/vmi-disks/root"} in compute["volumeMounts"]


async def test_a_vm_waits_for_volume_binding_while_its_claim_is_unbound(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "disk"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
    body = vm_manifest("binding", "Always")
    body["spec"]["template"]["spec"]["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": "disk"}}]
    # The simulated node would run the guest at once, claim or not (a real scheduler holds such a pod back), and
    # Running outranks WaitingForVolumeBinding: keep the VMI short of Running until the claim binds.
    cp.node.auto_run = False
    try:
        await cp.admin.create(VIRTUAL_MACHINES, body, ns)
        await cp.wait_printable(ns, "binding", "WaitingForVolumeBinding")
        # What the PV controller writes once it binds: the VM's status follows the claim.
        await cp.admin.patch(PERSISTENT_VOLUME_CLAIMS, "disk", {"spec": {"volumeName": "pv-disk"}}, ns)
        await cp.admin.patch(PERSISTENT_VOLUME_CLAIMS, "disk", {"status": {"phase": "Bound"}}, ns, subresource="status")
    finally:
        cp.node.auto_run = True
        cp.node.resync()
    await cp.wait_printable(ns, "binding", "Running")
