"""The pure parts of VM clones: names, the temporary snapshot and restore, and the patches (plain data)."""

from __future__ import annotations

import json
import re
from typing import Any

from pykubevirt.api.json_patch import apply_patch
from pykubevirt.controller import vm_clone_plan as plan

CLONE = {"metadata": {"name": "c", "namespace": "ns", "uid": "cu"}, "spec": {}}


def source_vm() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "src",
            "namespace": "ns",
            "labels": {"app": "web", "tier": "front", "team/owner": "a"},
            "annotations": {"note": "x", "restore.kubevirt.io/lastRestoreUID": "r-1"},
        },
        "spec": {
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": "src", "zone": "a"}},
                "spec": {
                    "domain": {
                        "firmware": {"uuid": "1234", "serial": "old"},
                        "devices": {
                            "interfaces": [{"name": "default", "macAddress": "02:00:00:00:00:01"}, {"name": "n2"}]
                        },
                    },
                    "volumes": [{"name": "root", "dataVolume": {"name": "root-dv"}}],
                },
            }
        },
    }


def test_temporary_objects_are_named_and_owned_by_the_clone() -> None:
    snapshot = plan.snapshot_of(CLONE, source_vm())
    assert snapshot["metadata"]["name"] == "tmp-snapshot-cu"
    assert snapshot["spec"]["source"] == {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "src"}
    owner = snapshot["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"], owner["uid"], owner["controller"]) == (
        "clone.kubevirt.io/v1beta1",
        "VirtualMachineClone",
        "cu",
        True,
    )
    restore = plan.restore_of(CLONE, "src", "tmp-snapshot-cu", ["p"])
    assert restore["metadata"]["name"] == "tmp-restore-cu"
    assert re.fullmatch(r"src-clone-[bcdfghjklmnpqrstvwxz2456789]{5}", restore["spec"]["target"]["name"])
    assert restore["spec"]["patches"] == ["p"]
    named = {
        **CLONE,
        "spec": {"target": {"kind": "VirtualMachine", "name": "dst"}, "volumeNamePolicy": "RandomizeNames"},
    }
    restore = plan.restore_of(named, "src", "s", [])
    assert restore["spec"]["target"]["name"] == "dst" and restore["spec"]["volumeRestorePolicy"] == "RandomizeNames"


def test_patches_give_the_copy_its_own_identity_and_filter_labels() -> None:
    spec = {
        "newMacAddresses": {"n2": "02:00:00:00:00:99"},
        "newSMBiosSerial": "new",
        "labelFilters": ["*", "!tier"],
        "template": {"labelFilters": ["kubevirt.io/.*"]},
        "patches": ['{"op":"add","path":"/metadata/labels/cloned","value":"yes"}'],
    }
    patches = plan.clone_patches(source_vm(), spec)
    assert (
        patches[0] == '{"op":"replace","path":"/spec/template/spec/domain/devices/interfaces/0/macAddress","value":""}'
    )
    result = apply_patch(source_vm(), [json.loads(p) for p in patches])
    domain = result["spec"]["template"]["spec"]["domain"]
    assert [i.get("macAddress") for i in domain["devices"]["interfaces"]] == ["", "02:00:00:00:00:99"]
    assert domain["firmware"] == {"uuid": "", "serial": "new"}
    assert result["metadata"]["labels"] == {"app": "web", "team/owner": "a", "cloned": "yes"}
    # No annotation filters: all kept (the last restore's mark is not the copy's to lose or keep).
    assert result["metadata"]["annotations"] == source_vm()["metadata"]["annotations"]
    assert result["spec"]["template"]["metadata"]["labels"] == {"kubevirt.io/domain": "src"}


def test_annotation_filters_ignore_the_restore_mark() -> None:
    patches = plan.clone_patches(source_vm(), {"annotationFilters": ["!note"]})
    removed = [json.loads(p)["path"] for p in patches if json.loads(p)["op"] == "remove"]
    assert removed == ["/metadata/annotations/note"]


def test_volumes_that_cannot_be_snapshotted_hold_the_clone_back() -> None:
    vm = source_vm()
    assert plan.volume_snapshot_problems(vm) == ["Virtual Machine volume root snapshot support unknown"]
    vm["status"] = {"volumeSnapshotStatuses": [{"name": "root", "enabled": False, "reason": "no class"}]}
    assert plan.volume_snapshot_problems(vm) == ["Virtual Machine volume root does not support snapshots"]
    vm["status"]["volumeSnapshotStatuses"][0]["enabled"] = True
    assert plan.volume_snapshot_problems(vm) == []
    content = {"spec": {"virtualMachineSnapshotName": "s", "source": {"virtualMachine": vm}, "volumeBackups": []}}
    assert plan.volumes_not_backed_up(content) == ["volume root is not backed up in snapshot s"]
