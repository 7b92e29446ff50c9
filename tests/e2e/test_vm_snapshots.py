"""VM snapshots and restores on a real guest, as a KubeVirt user drives them with kubectl and virtctl.

A VM boots from a `shared` claim and writes a marker to a blank `local` disk; an online VirtualMachineSnapshot takes
both claims (VolumeSnapshots of the embedded storage); the VM is stopped and its data disk wiped; a
VirtualMachineRestore puts the VM back on claims made from the snapshot, and the guest finds its marker again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.client.resources import (
    DATA_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
    VM_CLONES,
    VM_RESTORES,
    VM_SNAPSHOT_CONTENTS,
    VM_SNAPSHOTS,
    VOLUME_SNAPSHOTS,
)
from tests.e2e.test_persistent_disks import boot_claim, claim, pvc_vm
from tests.support.cluster import ClusterView
from tests.support.waiting import eventually
from tests.support.watching import watching

pytestmark = pytest.mark.e2e


SOURCE = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "svm"}


def manifest(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": kind, "metadata": {"name": name}, "spec": spec}


async def apply(kube: ClusterView, ns: str, obj: dict[str, Any], tmp_path: Path) -> str:
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return (await kube.run("kubectl", "apply", "-n", ns, "-f", str(path)))[1]


async def test_a_restore_brings_back_the_disks_a_snapshot_took(
    kube: ClusterView, guest_image: Path, tmp_path: Path
) -> None:
    ns = await kube.namespace()
    admin = kube.admin
    await boot_claim(kube, ns, "svm-boot", guest_image)
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("svm-data", "16Mi", "local", ["ReadWriteOnce"]), ns)
    await admin.create(VIRTUAL_MACHINES, pvc_vm("svm"), ns)
    vmi = await kube.wait_vmi_phase(ns, "svm", "Running", timeout=120)
    await kube.wait_serial(kube.node, await kube.launcher_pod(vmi), vmi, "wrote-persisted-marker", timeout=120)

    snapshot, freeze_states = await take_snapshot(kube, ns, tmp_path)
    status = snapshot["status"]
    assert status["phase"] == "Succeeded"
    assert status["sourceUID"] == (await admin.get(VIRTUAL_MACHINES, "svm", ns))["metadata"]["uid"]
    assert status["indications"] == ["GuestAgent", "Online"]
    # Frozen while the claims were copied, thawed once the VolumeSnapshots existed.
    assert "frozen" in freeze_states
    assert status["snapshotVolumes"] == {
        "includedVolumes": ["rootdisk", "datadisk"],
        "excludedVolumes": ["cloudinitdisk"],
    }
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"Progressing": ("False", "Operation complete"), "Ready": ("True", "Ready")}
    content = await admin.get(VM_SNAPSHOT_CONTENTS, status["virtualMachineSnapshotContentName"], ns)
    volume_snapshots = [b["volumeSnapshotName"] for b in content["spec"]["volumeBackups"]]
    assert len(volume_snapshots) == 2
    for name in volume_snapshots:
        assert (await admin.get(VOLUME_SNAPSHOTS, name, ns))["status"]["readyToUse"] is True
    vm = await admin.get(VIRTUAL_MACHINES, "svm", ns)
    assert "snapshotInProgress" not in vm["status"]
    assert "snapshot.kubevirt.io/snapshot-source-protection" not in vm["metadata"].get("finalizers", [])
    _, table, _ = await kube.run("kubectl", "get", "vmsnapshot", "-n", ns)
    assert table.split("\n")[0].split() == [
        "NAME",
        "SOURCEKIND",
        "SOURCENAME",
        "PHASE",
        "READYTOUSE",
        "CREATIONTIME",
        "ERROR",
    ]
    assert table.split("\n")[1].split()[:5] == ["before", "VirtualMachine", "svm", "Succeeded", "true"]

    # Stopped, and its data disk lost.
    await stop_and_wipe(kube, ns)

    await apply(
        kube,
        ns,
        manifest("VirtualMachineRestore", "back", {"target": SOURCE, "virtualMachineSnapshotName": "before"}),
        tmp_path,
    )

    async def restored() -> dict[str, Any] | None:
        found = await admin.get(VM_RESTORES, "back", ns)
        return found if (found.get("status") or {}).get("complete") is True else None

    restore = await eventually(restored, timeout=120, interval=0.5)
    claims = {r["volumeName"]: r["persistentVolumeClaim"] for r in restore["status"]["restores"]}
    uid = restore["metadata"]["uid"]
    assert claims == {"rootdisk": f"restore-{uid}-rootdisk", "datadisk": f"restore-{uid}-datadisk"}
    vm = await admin.get(VIRTUAL_MACHINES, "svm", ns)
    volumes = {v["name"]: v for v in vm["spec"]["template"]["spec"]["volumes"]}
    assert volumes["datadisk"]["persistentVolumeClaim"]["claimName"] == f"restore-{uid}-datadisk"
    assert vm["metadata"]["annotations"]["restore.kubevirt.io/lastRestoreUID"] == f"back-{uid}"
    assert "restoreInProgress" not in vm["status"]
    restored_claim = await admin.get(PERSISTENT_VOLUME_CLAIMS, f"restore-{uid}-datadisk", ns)
    assert restored_claim["spec"]["dataSource"]["kind"] == "VolumeSnapshot"
    assert restored_claim["metadata"]["ownerReferences"][0]["name"] == "svm"

    # The guest finds what it wrote before the snapshot, not the wiped disk.
    await kube.run("virtctl", "start", "svm", "-n", ns)
    vmi = await kube.wait_vmi_phase(ns, "svm", "Running", timeout=120)
    await kube.wait_serial(kube.node, await kube.launcher_pod(vmi), vmi, "found-persisted-marker", timeout=120)

    # Deleting the snapshot (deletionPolicy Delete by default) takes its content and VolumeSnapshots.
    await kube.run("kubectl", "delete", "vmsnapshot", "before", "-n", ns)

    async def all_gone() -> bool:
        contents = (await admin.list(VM_SNAPSHOT_CONTENTS, ns))["items"]
        snapshots = (await admin.list(VOLUME_SNAPSHOTS, ns))["items"]
        return not contents and not snapshots

    await eventually(all_gone, timeout=60, interval=0.5)
    _, out, _ = await kube.run("kubectl", "get", "vmrestore", "back", "-n", ns, "-o", "json")
    assert json.loads(out)["status"]["complete"] is True


async def stop_and_wipe(kube: ClusterView, ns: str) -> None:
    """`virtctl stop`, then the data disk's marker overwritten on the host."""
    await kube.run("virtctl", "stop", "svm", "-n", ns)

    async def stopped() -> bool:
        return await kube.vmi(ns, "svm") is None

    await eventually(stopped, timeout=120, interval=0.5)
    data = await kube.admin.get(PERSISTENT_VOLUME_CLAIMS, "svm-data", ns)
    image = Path((await kube.admin.get(PERSISTENT_VOLUMES, data["spec"]["volumeName"]))["spec"]["hostPath"]["path"])
    with (image / "disk.img").open("r+b") as disk:
        disk.write(b"\0" * 14)


async def take_snapshot(kube: ClusterView, ns: str, tmp_path: Path) -> tuple[dict[str, Any], list[str]]:
    """An online snapshot `before` of `svm` once its guest agent is up; the VMI's freeze states meanwhile."""

    async def agent_connected() -> bool:
        current = await kube.vmi(ns, "svm") or {}
        return any(c.get("type") == "AgentConnected" for c in (current.get("status") or {}).get("conditions") or [])

    await eventually(agent_connected, timeout=120, interval=0.5)
    freeze_states: list[str] = []

    def seen(vmi_version: dict[str, Any]) -> None:
        freeze_states.append(str((vmi_version.get("status") or {}).get("fsFreezeStatus") or "thawed"))

    async with watching(kube.admin, VIRTUAL_MACHINE_INSTANCES, ns, "svm", seen):
        await apply(kube, ns, manifest("VirtualMachineSnapshot", "before", {"source": SOURCE}), tmp_path)

        async def snapshot_ready() -> dict[str, Any] | None:
            found = await kube.admin.get(VM_SNAPSHOTS, "before", ns)
            return found if (found.get("status") or {}).get("readyToUse") is True else None

        snapshot = await eventually(snapshot_ready, timeout=120, interval=0.5)
        await eventually(lambda: freeze_states[-1] == "thawed", timeout=30, interval=0.2)
    return snapshot, freeze_states


def blank_dv_vm(name: str) -> dict[str, Any]:
    """A stopped VM whose data disk is a blank DataVolume from its template."""
    vm = pvc_vm(name)
    vm["spec"]["runStrategy"] = "Halted"
    vm["spec"]["dataVolumeTemplates"] = [
        {
            "metadata": {"name": f"{name}-data"},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "16Mi"}}}},
        }
    ]
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    volumes[1] = {"name": "datadisk", "dataVolume": {"name": f"{name}-data"}}
    return vm


async def claim_image(kube: ClusterView, ns: str, claim_name: str) -> Path:
    pvc = await kube.admin.get(PERSISTENT_VOLUME_CLAIMS, claim_name, ns)
    return Path((await kube.admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"]))["spec"]["hostPath"]["path"])


async def stopped_vm_with_marked_data(kube: ClusterView, ns: str, name: str, guest_image: Path, marker: bytes) -> None:
    """A stopped VM `name` booting from `<name>-boot`, whose imported blank DataVolume `<name>-data` holds `marker`."""
    await boot_claim(kube, ns, f"{name}-boot", guest_image)
    await kube.admin.create(VIRTUAL_MACHINES, blank_dv_vm(name), ns)

    async def imported() -> bool:
        found = (await kube.admin.list(DATA_VOLUMES, ns))["items"]
        return [((d.get("status") or {}).get("phase")) for d in found] == ["Succeeded"]

    await eventually(imported, timeout=60, interval=0.5)
    (await claim_image(kube, ns, f"{name}-data") / "disk.img").write_bytes(marker)


async def test_a_restore_of_a_data_volume_template_hands_the_restored_claim_to_a_new_data_volume(
    kube: ClusterView, guest_image: Path, tmp_path: Path
) -> None:
    ns = await kube.namespace()
    admin = kube.admin
    await stopped_vm_with_marked_data(kube, ns, "dvs", guest_image, b"offline-marker")
    source = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "dvs"}
    await apply(kube, ns, manifest("VirtualMachineSnapshot", "cold", {"source": source}), tmp_path)

    async def ready() -> dict[str, Any] | None:
        found = await admin.get(VM_SNAPSHOTS, "cold", ns)
        return found if (found.get("status") or {}).get("readyToUse") is True else None

    snapshot = await eventually(ready, timeout=60, interval=0.5)
    assert "indications" not in snapshot["status"]  # taken offline
    (await claim_image(kube, ns, "dvs-data") / "disk.img").write_bytes(b"overwritten!!!")
    await apply(
        kube,
        ns,
        manifest("VirtualMachineRestore", "warm", {"target": source, "virtualMachineSnapshotName": "cold"}),
        tmp_path,
    )

    async def complete() -> dict[str, Any] | None:
        found = await admin.get(VM_RESTORES, "warm", ns)
        return found if (found.get("status") or {}).get("complete") is True else None

    restore = await eventually(complete, timeout=60, interval=0.5)
    restored = f"restore-{restore['metadata']['uid']}-datadisk"
    assert restore["status"]["restores"][0]["dataVolumeName"] == restored
    assert restore["status"]["deletedDataVolumes"] == ["dvs-data"]
    vm = await admin.get(VIRTUAL_MACHINES, "dvs", ns)
    assert [t["metadata"]["name"] for t in vm["spec"]["dataVolumeTemplates"]] == [restored]

    # The VM's new DataVolume takes the restored claim over instead of importing into it; the guest's disk is back.
    await kube.run("virtctl", "start", "dvs", "-n", ns)
    await kube.wait_vmi_phase(ns, "dvs", "Running", timeout=120)
    dv = await admin.get(DATA_VOLUMES, restored, ns)
    assert dv["status"]["phase"] == "Succeeded"
    claim_owner = (await admin.get(PERSISTENT_VOLUME_CLAIMS, restored, ns))["metadata"]["ownerReferences"]
    assert [(r["kind"], r["name"], r.get("controller")) for r in claim_owner] == [("DataVolume", restored, True)]
    assert (await claim_image(kube, ns, restored) / "disk.img").read_bytes()[:14] == b"offline-marker"


async def test_a_restore_in_place_makes_the_same_claims_again_from_the_snapshot(
    kube: ClusterView, guest_image: Path, tmp_path: Path
) -> None:
    ns = await kube.namespace()
    admin = kube.admin
    await stopped_vm_with_marked_data(kube, ns, "inp", guest_image, b"inplace-marker")
    old_uids = {
        n: (await admin.get(PERSISTENT_VOLUME_CLAIMS, n, ns))["metadata"]["uid"] for n in ("inp-boot", "inp-data")
    }
    source = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "inp"}
    await apply(kube, ns, manifest("VirtualMachineSnapshot", "s", {"source": source}), tmp_path)

    async def ready() -> bool:
        return ((await admin.get(VM_SNAPSHOTS, "s", ns)).get("status") or {}).get("readyToUse") is True

    await eventually(ready, timeout=60, interval=0.5)
    (await claim_image(kube, ns, "inp-data") / "disk.img").write_bytes(b"overwritten!!!")
    spec = {"target": source, "virtualMachineSnapshotName": "s", "volumeRestorePolicy": "InPlace"}
    await apply(kube, ns, manifest("VirtualMachineRestore", "r", spec), tmp_path)

    async def complete() -> dict[str, Any] | None:
        found = await admin.get(VM_RESTORES, "r", ns)
        return found if (found.get("status") or {}).get("complete") is True else None

    restore = await eventually(complete, timeout=90, interval=0.5)
    entries = {e["volumeName"]: e for e in restore["status"]["restores"]}
    assert entries["rootdisk"]["persistentVolumeClaim"] == "inp-boot"
    assert (entries["datadisk"]["persistentVolumeClaim"], entries["datadisk"]["dataVolumeName"]) == (
        "inp-data",
        "inp-data",
    )
    assert "deletedDataVolumes" not in restore["status"]
    vm = await admin.get(VIRTUAL_MACHINES, "inp", ns)
    assert [t["metadata"]["name"] for t in vm["spec"]["dataVolumeTemplates"]] == ["inp-data"]
    for name in ("inp-boot", "inp-data"):
        claim_now = await admin.get(PERSISTENT_VOLUME_CLAIMS, name, ns)
        assert claim_now["metadata"]["uid"] != old_uids[name]  # made again, from the VolumeSnapshot
        assert claim_now["spec"]["dataSource"]["kind"] == "VolumeSnapshot"

    # The DataVolume stays and takes the new claim over once the VM's pod binds it; the disk is the snapshot's.
    await kube.run("virtctl", "start", "inp", "-n", ns)
    await kube.wait_vmi_phase(ns, "inp", "Running", timeout=120)
    assert (await admin.get(DATA_VOLUMES, "inp-data", ns))["status"]["phase"] == "Succeeded"
    assert (await claim_image(kube, ns, "inp-data") / "disk.img").read_bytes()[:14] == b"inplace-marker"


async def test_virtctl_create_clone_makes_a_vm_with_a_copy_of_the_disks(
    kube: ClusterView, guest_image: Path, tmp_path: Path
) -> None:
    ns = await kube.namespace()
    admin = kube.admin
    await stopped_vm_with_marked_data(kube, ns, "cln", guest_image, b"cloned-marker!")
    _, manifest_text, _ = await kube.run(
        "virtctl", "create", "clone", "--name", "copy", "--source-name", "cln", "--target-name", "cln-copy", "-n", ns
    )
    path = tmp_path / "clone.yaml"
    path.write_text(manifest_text)
    await kube.run("kubectl", "apply", "-f", str(path))

    async def succeeded() -> bool:
        return ((await admin.get(VM_CLONES, "copy", ns)).get("status") or {}).get("phase") == "Succeeded"

    await eventually(succeeded, timeout=90, interval=0.5)
    _, table, _ = await kube.run("kubectl", "get", "vmclone", "-n", ns)
    assert table.split("\n")[1].split() == ["copy", "Succeeded", "cln", "cln-copy"]
    copy = await admin.get(VIRTUAL_MACHINES, "cln-copy", ns)
    claims = [v for v in copy["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims[0]["persistentVolumeClaim"]["claimName"].startswith("restore-")
    assert copy["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0]["macAddress"] == ""

    # The copy runs on its own claims with the source's data; the source's claims are untouched.
    await kube.run("virtctl", "start", "cln-copy", "-n", ns)
    await kube.wait_vmi_phase(ns, "cln-copy", "Running", timeout=120)
    data = next(v["dataVolume"]["name"] for v in copy["spec"]["template"]["spec"]["volumes"] if "dataVolume" in v)
    assert (await claim_image(kube, ns, data) / "disk.img").read_bytes()[:14] == b"cloned-marker!"
    assert (await claim_image(kube, ns, "cln-data") / "disk.img").read_bytes()[:14] == b"cloned-marker!"

    # Its claims bound, the clone lets go of its temporary snapshot and restore.
    async def cleaned_up() -> bool:
        return not (await admin.list(VM_SNAPSHOTS, ns))["items"] and not (await admin.list(VM_RESTORES, ns))["items"]

    await eventually(cleaned_up, timeout=60, interval=0.5)
