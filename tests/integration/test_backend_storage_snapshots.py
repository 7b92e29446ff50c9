"""A VM's persistent EFI and TPM state in snapshots and restores: the backend-storage claim is snapshotted with the VM's
disks, and a restore hands the VM's `persistent-state-for` label to the restored claim and deletes the claim it
replaced, so the VM's next start has the snapshot's firmware variables. A real API server of the module's own,
virt-controller, and the embedded storage (claims, CSI snapshots) on a fake node; the VMs stay stopped, so no guest
is needed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.client.api import Object
from pykubevirt.client.errors import Invalid, NotFound
from pykubevirt.client.resources import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    VIRTUAL_MACHINES,
    VM_CLONES,
    VM_RESTORES,
    VM_SNAPSHOT_CONTENTS,
    VM_SNAPSHOTS,
)
from tests.integration.test_scheduler import node_manifest
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.snapshot_manifests import vm_restore, vm_snapshot
from tests.support.storage_plane import storage_on_fake_nodes
from tests.support.waiting import consistently, eventually, status_when

pytestmark = pytest.mark.asyncio(loop_scope="module")

STATE_LABEL = "persistent-state-for"
PERSISTENT_EFI = {"bootloader": {"efi": {"secureBoot": False, "persistent": True}}}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ControlPlane]:
    root = tmp_path_factory.mktemp("backend-snapshots")
    server = APIServerProcess(root / "data").start()
    try:
        async with storage_on_fake_nodes(server, root / "volumes", [node_manifest("n1")], "virt-controller"):
            plane = await start_control_plane(server)
            try:
                yield plane
            finally:
                await plane.stop()
    finally:
        server.stop()


def firmware_vm(name: str) -> Object:
    vm = vm_manifest(name, run_strategy="Halted")
    vm["spec"]["template"]["spec"]["domain"]["firmware"] = PERSISTENT_EFI
    return vm


async def state_claim(cp: ControlPlane, ns: str, vm: Object, suffix: str = "x1") -> Object:
    """The claim virt-controller makes on a VM's first start, as that start leaves it: bound, labelled, owned."""
    name = vm["metadata"]["name"]
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": f"{STATE_LABEL}-{name}-{suffix}",
            "labels": {STATE_LABEL: name},
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "name": name,
                    "uid": vm["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "10Mi"}},
            "storageClassName": "shared",
        },
    }
    created: Object = await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
    return created


async def claim_dir(cp: ControlPlane, ns: str, name: str) -> Path:
    async def bound() -> Object | None:
        pvc = await cp.admin.get(PERSISTENT_VOLUME_CLAIMS, name, ns)
        return pvc if (pvc.get("status") or {}).get("phase") == "Bound" else None

    pvc = await eventually(bound, timeout=30)
    pv = await cp.admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
    return Path(pv["spec"]["hostPath"]["path"])


def write_vars(directory: Path, vm: str, text: str) -> None:
    nvram = directory / "nvram"
    nvram.mkdir(exist_ok=True)
    (nvram / f"{vm}_VARS.fd").write_text(text)


def read_vars(directory: Path, vm: str) -> str:
    return (directory / "nvram" / f"{vm}_VARS.fd").read_text()


async def labelled(cp: ControlPlane, ns: str, vm: str) -> list[Object]:
    claims = await cp.admin.list(PERSISTENT_VOLUME_CLAIMS, ns, label_selector=f"{STATE_LABEL}={vm}")
    return [c for c in claims["items"] if not c["metadata"].get("deletionTimestamp")]


async def test_a_restore_brings_back_the_firmware_state_and_deletes_the_claim_it_replaced(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    vm = await cp.admin.create(VIRTUAL_MACHINES, firmware_vm("fw"), ns)
    original = await state_claim(cp, ns, vm)
    write_vars(await claim_dir(cp, ns, original["metadata"]["name"]), "fw", "vars at snapshot time")

    # The VM's status lists the claim as a volume a snapshot can take, under KubeVirt's volume name.
    async def listed() -> list[Any] | None:
        statuses = ((await cp.admin.get(VIRTUAL_MACHINES, "fw", ns)).get("status") or {}).get("volumeSnapshotStatuses")
        return statuses if statuses and len(statuses) == 2 else None

    statuses = await eventually(listed, timeout=30)
    assert statuses[1] == {"name": f"{STATE_LABEL}-fw", "enabled": True}

    await cp.admin.create(VM_SNAPSHOTS, vm_snapshot("before", "fw"), ns)
    done = await status_when(cp.admin, VM_SNAPSHOTS, ns, "before", lambda s: s.get("readyToUse") is True)
    assert done["status"]["snapshotVolumes"] == {"includedVolumes": [f"{STATE_LABEL}-fw"], "excludedVolumes": ["root"]}
    assert "indications" not in done["status"]  # not Partial: every volume that can be taken was
    content = await cp.admin.get(VM_SNAPSHOT_CONTENTS, done["status"]["virtualMachineSnapshotContentName"], ns)
    (backup,) = content["spec"]["volumeBackups"]
    assert backup["volumeName"] == f"{STATE_LABEL}-fw"
    assert backup["persistentVolumeClaim"]["metadata"]["name"] == original["metadata"]["name"]

    write_vars(await claim_dir(cp, ns, original["metadata"]["name"]), "fw", "vars changed later")
    restore = vm_restore("back", "fw", "before")
    await cp.admin.create(VM_RESTORES, restore, ns)
    finished = await status_when(cp.admin, VM_RESTORES, ns, "back", lambda s: s.get("complete") is True)
    (entry,) = finished["status"]["restores"]
    assert entry["volumeName"] == f"{STATE_LABEL}-fw"

    # The restored claim now holds the VM's state: the next start mounts it, with the snapshot's variables.
    (current,) = await labelled(cp, ns, "fw")
    assert current["metadata"]["name"] == entry["persistentVolumeClaim"]
    assert current["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
    assert read_vars(await claim_dir(cp, ns, entry["persistentVolumeClaim"]), "fw") == "vars at snapshot time"

    async def replaced_gone() -> bool:
        try:
            pvc = await cp.admin.get(PERSISTENT_VOLUME_CLAIMS, original["metadata"]["name"], ns)
        except NotFound:
            return True
        return bool(pvc["metadata"].get("deletionTimestamp"))

    await eventually(replaced_gone, timeout=30)


async def test_a_restore_into_another_vm_and_a_clone_are_refused_as_kubevirt_refuses_them(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    vm = await cp.admin.create(VIRTUAL_MACHINES, firmware_vm("src"), ns)
    await state_claim(cp, ns, vm)
    await cp.admin.create(VM_SNAPSHOTS, vm_snapshot("keys", "src"), ns)
    await status_when(cp.admin, VM_SNAPSHOTS, ns, "keys", lambda s: s.get("readyToUse") is True)
    restore = vm_restore("elsewhere", "dst", "keys")
    with pytest.raises(Invalid) as refused:
        await cp.admin.create(VM_RESTORES, restore, ns)
    assert refused.value.message.endswith(
        "Restore to a different VM is not supported when snapshotted VM has backend storage (persistent TPM or EFI)"
    )
    clone = {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": "copy"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "src"}},
    }
    await cp.admin.create(VM_CLONES, clone, ns)
    failed = await status_when(cp.admin, VM_CLONES, ns, "copy", lambda s: s.get("phase") == "Failed")
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == f"Clone of source with backendstorage is not supported: VM {ns}/src"


async def test_a_snapshot_of_a_vm_whose_state_claim_is_not_made_yet_waits_for_it(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    vm = await cp.admin.create(VIRTUAL_MACHINES, firmware_vm("fresh"), ns)
    await cp.admin.create(VM_SNAPSHOTS, vm_snapshot("early", "fresh"), ns)
    pending = await status_when(cp.admin, VM_SNAPSHOTS, ns, "early", lambda s: s.get("phase") == "InProgress")
    progressing = next(c for c in pending["status"]["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "Source not locked")

    async def still_waiting() -> bool:
        return (await cp.admin.get(VM_SNAPSHOTS, "early", ns))["status"].get("readyToUse") is not True

    await consistently(still_waiting, for_=1.0, interval=0.2)

    # Its first start makes the claim (made by hand here): the snapshot goes on and takes it.
    await state_claim(cp, ns, vm)
    done = await status_when(cp.admin, VM_SNAPSHOTS, ns, "early", lambda s: s.get("readyToUse") is True)
    assert done["status"]["snapshotVolumes"]["includedVolumes"] == [f"{STATE_LABEL}-fresh"]
