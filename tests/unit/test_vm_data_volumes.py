"""A VM's dataVolumeTemplates: the DataVolume made from one, and which phases let the VMI start."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.controller.vm_data_volumes import data_volume_from_template, data_volume_ready

VM: dict[str, Any] = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {"name": "vm", "namespace": "ns", "uid": "vm-uid"},
}


def test_a_data_volume_carries_its_templates_metadata_and_spec_and_names_the_vm() -> None:
    template = {
        "metadata": {"name": "disk", "labels": {"app": "a"}, "annotations": {"note": "n"}},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }
    dv = data_volume_from_template(VM, template)
    assert dv == {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": "disk",
            "namespace": "ns",
            "labels": {"app": "a", "kubevirt.io/created-by": "vm-uid"},
            "annotations": {"note": "n", "cdi.kubevirt.io/allowClaimAdoption": "true"},
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "name": "vm",
                    "uid": "vm-uid",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"],
    }
    # The template itself is left as it was.
    assert template["metadata"] == {"name": "disk", "labels": {"app": "a"}, "annotations": {"note": "n"}}
    dv["spec"]["source"]["blank"]["changed"] = True
    assert template["spec"]["source"]["blank"] == {}


def test_a_template_without_labels_or_spec_still_makes_a_data_volume() -> None:
    dv = data_volume_from_template(VM, {"metadata": {"name": "disk"}})
    assert dv["metadata"]["labels"] == {"kubevirt.io/created-by": "vm-uid"}
    assert dv["metadata"]["annotations"] == {"cdi.kubevirt.io/allowClaimAdoption": "true"}
    assert dv["spec"] == {}


@pytest.mark.parametrize(
    ("phase", "ready"),
    [
        ("Succeeded", True),
        ("WaitForFirstConsumer", True),
        ("PendingPopulation", True),
        ("ImportInProgress", False),
        ("Pending", False),
        ("Failed", False),
        (None, False),
    ],
)
def test_a_vmi_waits_for_its_data_volumes_until_populated_or_awaiting_it(phase: str | None, ready: bool) -> None:
    dv: dict[str, Any] = {"metadata": {"name": "disk"}}
    if phase is not None:
        dv["status"] = {"phase": phase}
    assert data_volume_ready(dv) is ready
