"""Backend storage for persistent EFI variables and TPM state: the claim KubeVirt creates, the class it picks,
when the launcher pod may use it, the pod's mounts of it, and the launcher's use of those mounts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import backend_storage as bs
from pykubevirt.api.generated_names import fnv32a
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import cluster_config
from pykubevirt.controller.backend_storage import claim_owner_keys
from pykubevirt.controller.launcher_pod import LauncherSettings, render_launcher_pod
from pykubevirt.launcher import persistent_state

EFI = {"firmware": {"bootloader": {"efi": {"secureBoot": False, "persistent": True}}}}
TPM = {"devices": {"tpm": {"persistent": True}}}
VM_OWNER = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "name": "vm1",
    "uid": "vm-uid",
    "controller": True,
    "blockOwnerDeletion": True,
}


def vmi(domain: dict[str, Any], owners: list[dict[str, Any]] | None = None, **meta: Any) -> dict[str, Any]:
    metadata = {"name": "vm1", "namespace": "ns", "uid": "vmi-uid", **meta}
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {"metadata": metadata, "spec": {"domain": {"devices": {"disableHotplug": True}, **domain}}}


def storage_class(name: str, binding: str = "Immediate", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}, "volumeBindingMode": binding}


def claim(name: str, vmi_name: str | None = "vm1", phase: str = "Pending", **spec: Any) -> dict[str, Any]:
    labels = {bs.PVC_PREFIX: vmi_name} if vmi_name else {}
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], **spec},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("domain", "needed"),
    [
        (EFI, True),
        (TPM, True),
        ({"devices": {"tpm": {"persistent": True, "enabled": False}}}, False),
        ({"devices": {"tpm": {}}}, False),
        ({"firmware": {"bootloader": {"efi": {}}}}, False),
        ({}, False),
    ],
)
def test_only_persistent_efi_or_an_enabled_persistent_tpm_need_backend_storage(
    domain: dict[str, Any], needed: bool
) -> None:
    assert bs.is_needed(vmi(domain)) is needed


def test_the_claim_is_kubevirts_owned_by_the_vm() -> None:
    pvc = bs.render_claim(vmi(TPM, [VM_OWNER]), "local", "ReadWriteOnce")
    assert pvc["metadata"] == {
        "generateName": "persistent-state-for-vm1-",
        "namespace": "ns",
        "ownerReferences": [VM_OWNER],
        "labels": {"persistent-state-for": "vm1", "cdi.kubevirt.io/applyStorageProfile": "true"},
    }
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "10Mi"}},
        "storageClassName": "local",
        "volumeMode": "Filesystem",
    }


def test_a_vmi_without_a_vm_owns_its_claim_itself() -> None:
    (owner,) = bs.render_claim(vmi(EFI), "local", "ReadWriteOnce")["metadata"]["ownerReferences"]
    assert owner["kind"] == "VirtualMachineInstance" and owner["uid"] == "vmi-uid" and owner["controller"] is True


def test_storage_class_configured_then_kubevirt_default_then_kubernetes_default() -> None:
    k8s = storage_class("local", **{bs.KUBERNETES_DEFAULT_CLASS: "true"})
    virt = storage_class("virt", **{bs.KUBEVIRT_DEFAULT_CLASS: "true"})
    assert bs.storage_class("fast", [k8s, virt]) == "fast"
    assert bs.storage_class("", [k8s, virt]) == "virt"
    assert bs.storage_class("", [k8s, storage_class("other")]) == "local"
    # The access mode follows: RWX for a class the administrator named, RWO for a default one.
    assert bs.access_mode("fast") == "ReadWriteMany" and bs.access_mode("") == "ReadWriteOnce"


def test_without_any_default_class_the_error_is_kubevirts() -> None:
    # The beta annotation does not count for KubeVirt's choice.
    beta = storage_class("old", **{"storageclass.beta.kubernetes.io/is-default-class": "true"})
    with pytest.raises(bs.BackendStorageError, match=r"^no default storage class found$"):
        bs.storage_class("", [beta, storage_class("shared")])


def test_claims_are_found_by_label_then_by_legacy_name() -> None:
    labelled = claim("persistent-state-for-vm1-abcde")
    legacy = claim("persistent-state-for-vm1", vmi_name=None)
    other = claim("persistent-state-for-vm2-xyz", vmi_name="vm2")
    deleted = claim("persistent-state-for-vm1-old")
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert bs.claim_for(vmi(TPM), [deleted, legacy, other, labelled]) is labelled
    assert bs.claim_for(vmi(TPM), [legacy, other]) is legacy
    assert bs.claim_for(vmi(TPM), [other, deleted]) is None
    assert claim_owner_keys(labelled) == ["ns/vm1"] and claim_owner_keys(legacy) == []


def test_readiness_bound_or_pending_for_a_first_consumer() -> None:
    classes = {"local": storage_class("local", "WaitForFirstConsumer"), "shared": storage_class("shared")}
    assert bs.is_ready(claim("a", phase="Bound"), classes)
    assert bs.is_ready(claim("a", storageClassName="local"), classes)
    assert not bs.is_ready(claim("a", storageClassName="shared"), classes)
    with pytest.raises(bs.BackendStorageError, match=r"^storage class missing not found$"):
        bs.is_ready(claim("a", storageClassName="missing"), classes)
    with pytest.raises(bs.BackendStorageError, match=r"^backend storage PVC lost$"):
        bs.is_ready(claim("a", phase="Lost"), classes)


def test_volume_status_entry_comes_first_once() -> None:
    pvc = claim("persistent-state-for-vm1-abcde")
    statuses = bs.with_volume_status([{"name": "root", "target": "vda"}], pvc)
    assert statuses[0] == {
        "name": "persistent-state-for-this-vm",
        "target": "",
        "persistentVolumeClaimInfo": {"claimName": "persistent-state-for-vm1-abcde", "accessModes": ["ReadWriteOnce"]},
    }
    assert bs.with_volume_status(statuses, pvc) == statuses


def test_kubevirt_cr_vm_state_storage_class() -> None:
    kubevirt = {"spec": {"configuration": {"vmStateStorageClass": "fast"}}}
    assert cluster_config(kubevirt, ClusterConfig()).vm_state_storage_class == "fast"
    assert cluster_config({"spec": {"configuration": {}}}, ClusterConfig()).vm_state_storage_class == ""


def compute_mounts(pod: dict[str, Any]) -> list[tuple[str, str, str]]:
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    return [(m["name"], m["mountPath"], m.get("subPath", "")) for m in mounts if m["name"].startswith(("vm-", "priv"))]


def test_launcher_pod_mounts_the_claim_where_libvirt_keeps_state() -> None:
    root = vmi({**EFI, **TPM})
    pod = render_launcher_pod(root, LauncherSettings(), backend_claim="persistent-state-for-vm1-abcde")
    state = [v for v in pod["spec"]["volumes"] if v["name"] == "vm-state"]
    assert state == [
        {
            "name": "vm-state",
            "persistentVolumeClaim": {"claimName": "persistent-state-for-vm1-abcde", "readOnly": False},
        }
    ]
    assert compute_mounts(pod) == [
        ("private", "/var/run/kubevirt-private", ""),
        ("vm-state", "/run/kubevirt-private/backend-storage-meta", "meta"),
        ("vm-state", "/var/lib/libvirt/swtpm", "swtpm"),
        ("vm-state", "/var/lib/swtpm-localca", "swtpm-localca"),
        ("vm-state", "/var/lib/libvirt/qemu/nvram", "nvram"),
    ]


def test_non_root_launcher_pod_mounts_under_the_private_dir() -> None:
    non_root = vmi(EFI, annotations={"kubevirt.io/nonroot": ""})
    pod = render_launcher_pod(non_root, LauncherSettings(), backend_claim="c")
    assert compute_mounts(pod)[1:] == [
        ("vm-state", "/run/kubevirt-private/backend-storage-meta", "meta"),
        ("private-libvirt", "/var/run/kubevirt-private/libvirt", ""),
        ("private-libvirt-qemu", "/var/run/kubevirt-private/libvirt/qemu", ""),
        ("vm-state", "/var/run/kubevirt-private/libvirt/qemu/nvram", "nvram"),
    ]


def test_no_claim_no_mounts() -> None:
    pod = render_launcher_pod(vmi(EFI), LauncherSettings())
    assert all(v["name"] != "vm-state" for v in pod["spec"]["volumes"])


def test_launcher_finds_its_state_dirs_in_its_mounts(tmp_path: Path) -> None:
    mounts = {
        "/var/lib/libvirt/qemu/nvram": str(tmp_path / "pvc/nvram"),
        "/var/lib/libvirt/swtpm": str(tmp_path / "pvc/swtpm"),
    }
    assert persistent_state.nvram_dir(mounts) == str(tmp_path / "pvc/nvram")
    assert persistent_state.nvram_dir({"/var/run/kubevirt-private": "/x"}) is None
    root = tmp_path / "lv"
    # A directory libvirt made before the link (empty: the TPM never ran from it) gives way to the link.
    (root / "lib" / "swtpm").mkdir(parents=True)
    link = persistent_state.link_swtpm_storage(root, mounts)
    assert link == root / "lib" / "swtpm" and os.readlink(link) == str(tmp_path / "pvc/swtpm")
    assert (tmp_path / "pvc/swtpm").is_dir()
    assert persistent_state.link_swtpm_storage(root, mounts) == link
    assert persistent_state.link_swtpm_storage(tmp_path / "other", {}) is None


# ------------------------------------------------------------------------------------- snapshots, restores, exports


def vm_with(domain: dict[str, Any], name: str = "vm1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"template": {"spec": {"domain": domain}}}}


def test_a_vm_needs_backend_storage_as_its_template_does() -> None:
    assert bs.vm_needs(vm_with(EFI)) and bs.vm_needs(vm_with(TPM))
    assert not bs.vm_needs(vm_with({"devices": {"tpm": {}}}))
    assert not bs.vm_needs({"metadata": {"name": "no-template"}, "spec": {}})


def test_the_claim_goes_by_kubevirts_volume_name_shortened_with_a_hash_when_long() -> None:
    assert bs.vm_volume_name("fw") == "persistent-state-for-fw"
    assert bs.vm_volume("fw", "persistent-state-for-fw-x1") == {
        "name": "persistent-state-for-fw",
        "persistentVolumeClaim": {"claimName": "persistent-state-for-fw-x1"},
    }
    # library-go's naming.GetName: a VM name too long for any of it to fit leaves the prefix and a hash of the whole.
    vm = "a-very-long-virtual-machine-name-for-a-database-server-01"
    long_name = bs.vm_volume_name(vm)
    assert long_name == f"persistent-state-for-{fnv32a('persistent-state-for-' + vm)}"
    assert long_name != bs.vm_volume_name("a-very-long-virtual-machine-name-for-a-database-server-02")


def test_of_several_claims_labelled_for_a_vm_the_newest_live_one_is_its_own() -> None:
    def pvc(name: str, created: str, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-07T10:00:00Z"
        return {"metadata": meta}

    older, newer = pvc("a", "2026-12-01T10:00:00Z"), pvc("b", "2026-12-02T10:00:00Z")
    going = pvc("c", "2026-12-03T10:00:00Z", deleting=True)
    assert bs.newest_live_claim([older, going, newer]) is newer
    assert bs.newest_live_claim([going]) is None
    assert bs.newest_live_claim([]) is None
