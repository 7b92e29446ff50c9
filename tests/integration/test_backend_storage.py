"""Backend storage against a real API server of its own (storage classes are cluster-wide): the claim virt-controller
makes for persistent EFI/TPM state, the launcher pod that mounts it, its reuse on the next start, and KubeVirt's
error when the cluster has no storage class to make it with."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.client.resources import (
    KUBEVIRTS,
    MIGRATIONS,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    STORAGE_CLASSES,
    VIRTUAL_MACHINES,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

PERSISTENT = {
    "firmware": {"bootloader": {"efi": {"secureBoot": False, "persistent": True}}},
    "devices": {"tpm": {"persistent": True}, "disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
}


@pytest.fixture(scope="module")
def own_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path_factory.mktemp("backend-storage") / "data").start()
    yield server
    server.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(own_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(own_apiserver)
    yield plane
    await plane.stop()


def persistent_vm(name: str, strategy: str = "Always") -> dict[str, Any]:
    vm = vm_manifest(name, strategy)
    vm["spec"]["template"]["spec"]["domain"].update(PERSISTENT)
    return vm


async def state_claims(cp: ControlPlane, ns: str, vm: str) -> list[dict[str, Any]]:
    return list(
        (await cp.admin.list(PERSISTENT_VOLUME_CLAIMS, ns, label_selector=f"persistent-state-for={vm}"))["items"]
    )


async def test_without_a_default_storage_class_the_vmi_says_so(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, persistent_vm("noclass"), ns)

    async def unsynchronized() -> dict[str, Any] | None:
        vmi = await cp.vmi(ns, "noclass")
        conditions = ((vmi or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Synchronized"), None)

    condition = await eventually(unsynchronized)
    assert condition["status"] == "False"
    assert condition["reason"] == "FailedBackendStorageCreate"
    assert condition["message"] == "no default storage class found"

    async def mirrored() -> dict[str, Any] | None:
        vm = await cp.vm(ns, "noclass") or {}
        conditions = (vm.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Synchronized"), None)

    # The VM shows it too (KubeVirt's VM mirrors its VMI's conditions; its printableStatus stays Starting).
    assert (await eventually(mirrored))["message"] == "no default storage class found"
    assert await state_claims(cp, ns, "noclass") == []
    assert (await cp.admin.list(PODS, ns))["items"] == []
    await cp.admin.delete(VIRTUAL_MACHINES, "noclass", ns)


async def test_the_claim_is_made_mounted_and_reused_on_the_next_start(cp: ControlPlane, tmp_path: Path) -> None:
    # A KubeVirt default class binding on first consumer: the launcher pod may use the claim while it is pending.
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "virt-default", "annotations": {"storageclass.kubevirt.io/is-default-virt-class": "true"}},
        "provisioner": "example.com/none",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    await cp.admin.create(STORAGE_CLASSES, sc)
    ns = await cp.namespace()
    vm = await cp.admin.create(VIRTUAL_MACHINES, persistent_vm("keeper"), ns)
    vmi = await cp.wait_vmi_phase(ns, "keeper", "Running")
    (pvc,) = await state_claims(cp, ns, "keeper")
    assert pvc["metadata"]["name"].startswith("persistent-state-for-keeper-")
    assert pvc["metadata"]["labels"]["cdi.kubevirt.io/applyStorageProfile"] == "true"
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
    assert pvc["spec"]["storageClassName"] == "virt-default"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Mi"
    assert vmi["status"]["volumeStatus"][0] == {
        "name": "persistent-state-for-this-vm",
        "target": "",
        "persistentVolumeClaimInfo": {"claimName": pvc["metadata"]["name"], "accessModes": ["ReadWriteOnce"]},
    }
    (pod,) = (await cp.admin.list(PODS, ns, label_selector=f"kubevirt.io/created-by={vmi['metadata']['uid']}"))["items"]
    state = next(v for v in pod["spec"]["volumes"] if v["name"] == "vm-state")
    assert state["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    sub_paths = {m.get("subPath") for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "vm-state"}
    assert sub_paths == {"meta", "swtpm", "swtpm-localca", "nvram"}

    # Stop and start: the next VMI's launcher pod gets the same claim, and no second one is made.
    await cp.admin.patch(VIRTUAL_MACHINES, "keeper", {"spec": {"runStrategy": "Halted"}}, ns)
    await cp.wait_vmi_gone(ns, "keeper", vmi["metadata"]["uid"])
    await cp.admin.patch(VIRTUAL_MACHINES, "keeper", {"spec": {"runStrategy": "Always"}}, ns)

    async def restarted() -> dict[str, Any] | None:
        current = await cp.vmi(ns, "keeper")
        uid = ((current or {}).get("metadata") or {}).get("uid")
        phase = ((current or {}).get("status") or {}).get("phase")
        return current if uid and uid != vmi["metadata"]["uid"] and phase == "Running" else None

    again = await eventually(restarted)
    pods = await cp.admin.list(PODS, ns, label_selector=f"kubevirt.io/created-by={again['metadata']['uid']}")
    (pod,) = pods["items"]
    state = next(v for v in pod["spec"]["volumes"] if v["name"] == "vm-state")
    assert state["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert [c["metadata"]["uid"] for c in await state_claims(cp, ns, "keeper")] == [pvc["metadata"]["uid"]]

    # The claim belongs to the VM: the garbage collector takes it with the VM.
    await cp.admin.delete(VIRTUAL_MACHINES, "keeper", ns)

    async def collected() -> bool:
        left = await state_claims(cp, ns, "keeper")
        return all(c["metadata"].get("deletionTimestamp") for c in left)

    await eventually(collected)


async def test_a_migration_target_mounts_the_shared_claim_of_the_persistent_state(cp: ControlPlane) -> None:
    """vmStateStorageClass set: the claim is ReadWriteMany, and a migration's target pod mounts that same claim
    (KubeVirt's CreatePVCForMigrationTarget for an RWX claim: source and target PersistentStatePVCName agree)."""
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "rwx-state"},
        "provisioner": "example.com/none",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    await cp.admin.create(STORAGE_CLASSES, sc)
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt"},
        "spec": {"configuration": {"vmStateStorageClass": "rwx-state"}},
    }
    await cp.admin.create(KUBEVIRTS, kubevirt, "kubevirt")
    try:
        await eventually(lambda: cp.controller.config.vm_state_storage_class == "rwx-state")
        ns = await cp.namespace()
        await cp.admin.create(VIRTUAL_MACHINES, persistent_vm("mover"), ns)
        vmi = await cp.wait_vmi_phase(ns, "mover", "Running")
        (pvc,) = await state_claims(cp, ns, "mover")
        claim = pvc["metadata"]["name"]
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert vmi["status"]["volumeStatus"][0]["persistentVolumeClaimInfo"]["accessModes"] == ["ReadWriteMany"]

        vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
        vmim |= {"metadata": {"name": "move-mover"}, "spec": {"vmiName": "mover"}}
        created = await cp.admin.create(MIGRATIONS, vmim, ns)

        async def handed_over() -> dict[str, Any] | None:
            current = await cp.vmi(ns, "mover")
            state = ((current or {}).get("status") or {}).get("migrationState") or {}
            return state if state.get("migrationUid") == created["metadata"]["uid"] else None

        state = await eventually(handed_over)
        assert state["sourcePersistentStatePVCName"] == state["targetPersistentStatePVCName"] == claim
        selector = f"kubevirt.io/migrationJobUID={created['metadata']['uid']}"
        (target,) = (await cp.admin.list(PODS, ns, label_selector=selector))["items"]
        volume = next(v for v in target["spec"]["volumes"] if v["name"] == "vm-state")
        assert volume["persistentVolumeClaim"]["claimName"] == claim
        # No second claim was made for the target.
        assert [c["metadata"]["name"] for c in await state_claims(cp, ns, "mover")] == [claim]
        current = await cp.admin.get(MIGRATIONS, "move-mover", ns)
        assert current["status"]["migrationState"]["targetPersistentStatePVCName"] == claim
    finally:
        await cp.admin.delete(KUBEVIRTS, "kubevirt", "kubevirt")
        await eventually(lambda: cp.controller.config.vm_state_storage_class == "")
