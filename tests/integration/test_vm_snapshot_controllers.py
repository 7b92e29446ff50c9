"""virt-controller's snapshot and restore controllers on a simulated node: what a user sees in their statuses.

VMs here have containerDisks only, so a snapshot records the VM's spec and no claim (the claims' path runs on real
guests in tests/e2e/test_vm_snapshots.py).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.client.errors import Invalid, NotFound
from pykubevirt.client.resources import (
    CONTROLLER_REVISIONS,
    EVENTS,
    INSTANCETYPES,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
    VM_CLONES,
    VM_RESTORES,
    VM_SNAPSHOT_CONTENTS,
    VM_SNAPSHOTS,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.snapshot_manifests import vm_restore, vm_snapshot
from tests.support.waiting import eventually, status_when

pytestmark = pytest.mark.asyncio(loop_scope="module")

SOURCE_FINALIZER = "snapshot.kubevirt.io/snapshot-source-protection"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


async def _gone(cp: ControlPlane, resource: Any, ns: str, name: str) -> bool:
    try:
        await cp.admin.get(resource, name, ns)
    except NotFound:
        return True
    return False


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


async def test_a_stopped_vms_snapshot_records_its_spec_and_lets_go_of_it(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    vm = await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("quiet", run_strategy="Halted"), ns)
    await cp.admin.create(VM_SNAPSHOTS, vm_snapshot("s1", "quiet"), ns)
    snapshot = await status_when(cp.admin, VM_SNAPSHOTS, ns, "s1", lambda s: s.get("readyToUse") is True)
    status = snapshot["status"]
    assert status["phase"] == "Succeeded"
    assert status["sourceUID"] == vm["metadata"]["uid"]
    assert "indications" not in status  # offline
    assert status["snapshotVolumes"] == {"excludedVolumes": ["root"]}
    assert conditions(status) == {"Progressing": ("False", "Operation complete"), "Ready": ("True", "Ready")}
    content = await cp.admin.get(VM_SNAPSHOT_CONTENTS, f"vmsnapshot-content-{snapshot['metadata']['uid']}", ns)
    assert content["spec"]["virtualMachineSnapshotName"] == "s1"
    assert content["spec"]["source"]["virtualMachine"]["spec"]["runStrategy"] == "Halted"
    assert content["status"]["readyToUse"] is True
    assert snapshot["metadata"]["finalizers"] == ["snapshot.kubevirt.io/vmsnapshot-protection"]

    async def unlocked() -> bool:
        found = await cp.admin.get(VIRTUAL_MACHINES, "quiet", ns)
        return "snapshotInProgress" not in (found.get("status") or {}) and SOURCE_FINALIZER not in (
            found["metadata"].get("finalizers") or []
        )

    await eventually(unlocked, timeout=30, interval=0.2)
    events = [e["reason"] for e in (await cp.admin.list(EVENTS, ns))["items"]]
    assert "SuccessfulVirtualMachineSnapshotContentCreate" in events

    # A restore into a VM that does not exist makes it, stopped, with the snapshot's spec.
    await cp.admin.create(VM_RESTORES, vm_restore("r1", "copy", "s1"), ns)
    restore = await status_when(cp.admin, VM_RESTORES, ns, "r1", lambda s: s.get("complete") is True)
    assert conditions(restore["status"]) == {
        "Progressing": ("False", "Operation complete"),
        "Ready": ("True", "Operation complete"),
    }
    copy = await cp.admin.get(VIRTUAL_MACHINES, "copy", ns)
    assert copy["spec"]["runStrategy"] == "Halted"
    assert copy["spec"]["template"]["spec"]["volumes"] == vm["spec"]["template"]["spec"]["volumes"]
    assert copy["metadata"]["annotations"]["restore.kubevirt.io/lastRestoreUID"] == f"r1-{restore['metadata']['uid']}"

    # Deleting the snapshot takes its content.
    await cp.admin.delete(VM_SNAPSHOTS, "s1", ns)

    async def gone() -> bool:
        return (
            not (await cp.admin.list(VM_SNAPSHOT_CONTENTS, ns))["items"]
            and not (await cp.admin.list(VM_SNAPSHOTS, ns))["items"]
        )

    await eventually(gone, timeout=30, interval=0.2)


async def test_a_running_vm_is_snapshotted_online_and_a_restore_waits_for_it_to_stop(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("busy"), ns)
    await cp.wait_vmi_phase(ns, "busy", "Running", timeout=30)
    await cp.admin.create(VM_SNAPSHOTS, vm_snapshot("online", "busy"), ns)
    snapshot = await status_when(cp.admin, VM_SNAPSHOTS, ns, "online", lambda s: s.get("readyToUse") is True)
    assert snapshot["status"]["indications"] == ["NoGuestAgent", "Online"]
    assert [i["indication"] for i in snapshot["status"]["sourceIndications"]] == ["NoGuestAgent", "Online"]

    # The VM still runs: by default a restore waits for it to stop, and fails when the grace period (5m) is over.
    await cp.admin.create(VM_RESTORES, vm_restore("wait", "busy", "online"), ns)
    waiting = await status_when(cp.admin, VM_RESTORES, ns, "wait", lambda s: "Waiting" in str(s.get("conditions")))
    assert conditions(waiting["status"])["Ready"] == (
        "False",
        "Waiting for target VM to be powered off. Please stop the restore target to proceed with restore, "
        "or the operation will fail after 5m0s",
    )
    assert cp.controller.snapshotting is not None
    restores = next(q for q in cp.controller.snapshotting[1] if q.name == "vmrestore")
    looked_at = await restores.reconciler.reconcile(f"{ns}/wait")
    # Nothing else need happen for the failure: it looks again when the grace period ends.
    assert looked_at is not None and 290 < (looked_at.requeue_after or 0) <= 301
    await cp.admin.delete(VM_RESTORES, "wait", ns)
    await eventually(lambda: _gone(cp, VM_RESTORES, ns, "wait"), timeout=30, interval=0.2)

    # A restore that must not wait fails at once.
    await cp.admin.create(VM_RESTORES, vm_restore("now", "busy", "online", targetReadinessPolicy="FailImmediate"), ns)
    failed = await status_when(cp.admin, VM_RESTORES, ns, "now", lambda s: "Failure" in conditions(s))
    message = "Restore target VMI must be powered off before restore operation"
    assert conditions(failed["status"])["Failure"] == ("True", message)
    assert failed["status"]["complete"] is False

    # Even failed, it holds the target (KubeVirt's admitter counts every restore not complete) until deleted.
    with pytest.raises(Invalid, match='VirtualMachineRestore "now" in progress'):
        await cp.admin.create(VM_RESTORES, vm_restore("again", "busy", "online"), ns)
    await cp.admin.delete(VM_RESTORES, "now", ns)
    await eventually(lambda: _gone(cp, VM_RESTORES, ns, "now"), timeout=30, interval=0.2)

    # StopTarget stops the VM itself and then restores.
    await cp.admin.create(VM_RESTORES, vm_restore("stop", "busy", "online", targetReadinessPolicy="StopTarget"), ns)
    done = await status_when(cp.admin, VM_RESTORES, ns, "stop", lambda s: s.get("complete") is True, timeout=60)
    assert done["metadata"]["ownerReferences"][0]["name"] == "busy"
    vm = await cp.admin.get(VIRTUAL_MACHINES, "busy", ns)
    assert vm["spec"]["runStrategy"] == "Halted"
    assert "restoreInProgress" not in vm["status"]


async def test_a_vm_restored_from_a_snapshot_keeps_its_instancetype_when_the_source_is_gone(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    instancetype = {
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineInstancetype",
        "metadata": {"name": "small"},
        "spec": {"cpu": {"guest": 2}, "memory": {"guest": "192Mi"}},
    }
    await cp.admin.create(INSTANCETYPES, instancetype, ns)
    source = vm_manifest("typed", instancetype={"kind": "VirtualMachineInstancetype", "name": "small"})
    del source["spec"]["template"]["spec"]["domain"]["memory"]
    await cp.admin.create(VIRTUAL_MACHINES, source, ns)
    await cp.wait_vmi_phase(ns, "typed", "Running", timeout=30)
    typed = await cp.admin.get(VIRTUAL_MACHINES, "typed", ns)
    source_revision = typed["status"]["instancetypeRef"]["controllerRevisionRef"]["name"]
    assert source_revision.startswith("typed-small-")

    # The snapshot of the running VM holds its own copy of the instancetype's revision.
    await cp.admin.create(VM_SNAPSHOTS, vm_snapshot("snap", "typed"), ns)
    snapshot = await status_when(cp.admin, VM_SNAPSHOTS, ns, "snap", lambda s: s.get("readyToUse") is True)
    content = await cp.admin.get(VM_SNAPSHOT_CONTENTS, snapshot["status"]["virtualMachineSnapshotContentName"], ns)
    held = content["spec"]["source"]["virtualMachine"]["spec"]["instancetype"]["revisionName"]
    assert held == source_revision.replace("typed", "snap", 1)
    held_revision = await cp.admin.get(CONTROLLER_REVISIONS, held, ns)
    assert held_revision["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachineSnapshot"
    assert held_revision["metadata"]["ownerReferences"][0]["uid"] == snapshot["metadata"]["uid"]
    assert held_revision["data"]["spec"] == instancetype["spec"]

    # A restore into a new VM gives it a revision of its own, which it owns.
    await cp.admin.create(VM_RESTORES, vm_restore("back", "restored", "snap"), ns)
    await status_when(cp.admin, VM_RESTORES, ns, "back", lambda s: s.get("complete") is True)
    restored = await cp.admin.get(VIRTUAL_MACHINES, "restored", ns)
    own = restored["spec"]["instancetype"]["revisionName"]
    assert own == source_revision.replace("typed", "restored", 1)
    own_revision = await cp.admin.get(CONTROLLER_REVISIONS, own, ns)
    assert [(o["kind"], o["uid"]) for o in own_revision["metadata"]["ownerReferences"]] == [
        ("VirtualMachine", restored["metadata"]["uid"])
    ]

    # Restored in place, the source keeps the revision it has, which holds the same instancetype.
    typed = await cp.admin.get(VIRTUAL_MACHINES, "typed", ns)
    typed["spec"]["runStrategy"] = "Halted"
    await cp.admin.update(VIRTUAL_MACHINES, typed)
    await cp.wait_vmi_gone(ns, "typed", (await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "typed", ns))["metadata"]["uid"])
    kept_uid = (await cp.admin.get(CONTROLLER_REVISIONS, source_revision, ns))["metadata"]["uid"]
    await cp.admin.create(VM_RESTORES, vm_restore("in-place", "typed", "snap"), ns)
    await status_when(cp.admin, VM_RESTORES, ns, "in-place", lambda s: s.get("complete") is True)
    typed = await cp.admin.get(VIRTUAL_MACHINES, "typed", ns)
    assert typed["spec"]["instancetype"]["revisionName"] == source_revision
    assert (await cp.admin.get(CONTROLLER_REVISIONS, source_revision, ns))["metadata"]["uid"] == kept_uid

    # With the source VM and the revisions it owned gone (the garbage collector's part), the restored VM starts
    # with the instancetype as the snapshot took it, even after the instancetype itself changed.
    await cp.admin.delete(VIRTUAL_MACHINES, "typed", ns)
    with contextlib.suppress(NotFound):  # the garbage collector may have taken it with its VM already
        await cp.admin.delete(CONTROLLER_REVISIONS, source_revision, ns)
    await eventually(lambda: _gone(cp, CONTROLLER_REVISIONS, ns, source_revision), timeout=30, interval=0.2)
    changed = await cp.admin.get(INSTANCETYPES, "small", ns)
    changed["spec"]["memory"]["guest"] = "256Mi"
    await cp.admin.update(INSTANCETYPES, changed)
    restored["spec"]["runStrategy"] = "Always"
    await cp.admin.update(VIRTUAL_MACHINES, restored)
    vmi = await cp.wait_vmi_phase(ns, "restored", "Running", timeout=30)
    assert vmi["spec"]["domain"]["memory"]["guest"] == "192Mi"
    assert vmi["spec"]["domain"]["cpu"]["sockets"] * vmi["spec"]["domain"]["cpu"].get("cores", 1) == 2


async def test_a_snapshot_of_a_missing_vm_waits_for_it(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VM_SNAPSHOTS, vm_snapshot("early", "later"), ns)
    snapshot = await status_when(cp.admin, VM_SNAPSHOTS, ns, "early", lambda s: "Progressing" in conditions(s))
    assert snapshot["status"]["phase"] == "InProgress"
    assert conditions(snapshot["status"]) == {
        "Progressing": ("False", "Source does not exist"),
        "Ready": ("False", "Not ready"),
    }
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("later", run_strategy="Halted"), ns)
    await status_when(cp.admin, VM_SNAPSHOTS, ns, "early", lambda s: s.get("phase") == "Succeeded")


async def test_a_clone_makes_a_new_vm_through_a_snapshot_and_a_restore_it_then_deletes(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    source = vm_manifest("orig", run_strategy="Halted")
    source["metadata"]["labels"]["secret-label"] = "no"
    await cp.admin.create(VIRTUAL_MACHINES, source, ns)
    clone = {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": "twin"},
        "spec": {
            "source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "orig"},
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "orig-twin"},
            "labelFilters": ["*", "!secret-label"],
        },
    }
    await cp.admin.create(VM_CLONES, clone, ns)
    done = await status_when(cp.admin, VM_CLONES, ns, "twin", lambda s: s.get("phase") == "Succeeded", timeout=60)
    assert done["status"]["targetName"] == "orig-twin"
    assert conditions(done["status"]) == {"Progressing": ("False", "Ready"), "Ready": ("True", "Ready")}
    twin = await cp.admin.get(VIRTUAL_MACHINES, "orig-twin", ns)
    assert twin["spec"]["runStrategy"] == "Halted"
    assert twin["metadata"]["labels"] == {"vm-label": "on-vm"}
    assert twin["spec"]["template"]["spec"]["volumes"] == source["spec"]["template"]["spec"]["volumes"]

    # Its temporary snapshot and restore are gone once the target's claims (none here) are bound.
    async def cleaned_up() -> bool:
        snapshots = (await cp.admin.list(VM_SNAPSHOTS, ns))["items"]
        restores = (await cp.admin.list(VM_RESTORES, ns))["items"]
        current = (await cp.admin.get(VM_CLONES, "twin", ns))["status"]
        return not snapshots and not restores and "snapshotName" not in current and "restoreName" not in current

    await eventually(cleaned_up, timeout=30, interval=0.2)
    reasons = [e["reason"] for e in (await cp.admin.list(EVENTS, ns))["items"] if e["involvedObject"]["name"] == "twin"]
    for reason in ("SnapshotCreated", "SnapshotReady", "RestoreCreated", "RestoreReady", "TargetVMCreated", "PVCBound"):
        assert reason in reasons

    # The clone goes with the VM it made.
    await cp.admin.delete(VIRTUAL_MACHINES, "orig-twin", ns)
    await eventually(lambda: _gone(cp, VM_CLONES, ns, "twin"), timeout=30, interval=0.2)


async def test_a_clone_of_a_missing_vm_waits_for_it(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    clone = {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": "early"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "later"}},
    }
    await cp.admin.create(VM_CLONES, clone, ns)
    pending = await status_when(cp.admin, VM_CLONES, ns, "early", lambda s: "Ready" in conditions(s))
    assert "phase" not in pending["status"] or pending["status"]["phase"] == ""
    assert conditions(pending["status"]) == {
        "Progressing": ("False", "Pending"),
        "Ready": ("False", f"Source doesnt exist: VirtualMachine {ns}/later"),
    }
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("later", run_strategy="Halted"), ns)
    done = await status_when(cp.admin, VM_CLONES, ns, "early", lambda s: s.get("phase") == "Succeeded", timeout=60)
    assert re.fullmatch(r"clone-later-[a-z0-9]{5}", done["status"]["targetName"])  # the mutator named it
