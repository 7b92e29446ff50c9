"""Which hotplugged claims virt-controller places on the VMI's node: those of a WaitForFirstConsumer class, unbound
and with no node chosen (what the scheduler does for KubeVirt's attachment pod)."""

from __future__ import annotations

from typing import Any

from pykubevirt.controller.hotplug_claims import claims_to_place

WFFC = {"metadata": {"name": "local", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}}
WFFC["volumeBindingMode"] = "WaitForFirstConsumer"
IMMEDIATE = {"metadata": {"name": "shared"}, "volumeBindingMode": "Immediate"}


def vmi(node: str = "node01", **volume: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vm"}, "spec": {"volumes": [{"name": "v", **volume}]}, "status": {"nodeName": node}}


def claim(class_name: str | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {} if class_name is None else {"storageClassName": class_name}
    return {"metadata": {"name": "c", **extra.pop("metadata", {})}, "spec": {**spec, **extra}}


HOTPLUGGED = {"persistentVolumeClaim": {"claimName": "c", "hotpluggable": True}}
DUMP = {"memoryDump": {"claimName": "c", "hotpluggable": True}}


def test_a_hotplugged_claim_of_a_wffc_class_goes_to_the_vmis_node() -> None:
    assert claims_to_place(vmi(**HOTPLUGGED), {"c": claim("local")}, [WFFC, IMMEDIATE]) == [("c", "node01")]
    assert claims_to_place(vmi(**DUMP), {"c": claim("local")}, [WFFC]) == [("c", "node01")]
    # No class named: the default class decides.
    assert claims_to_place(vmi(**DUMP), {"c": claim()}, [WFFC]) == [("c", "node01")]


def test_others_are_left_alone() -> None:
    assert claims_to_place(vmi(**HOTPLUGGED), {"c": claim("shared")}, [WFFC, IMMEDIATE]) == []
    assert claims_to_place(vmi(**HOTPLUGGED), {"c": claim("local", volumeName="pv-1")}, [WFFC]) == []
    chosen = claim("local", metadata={"annotations": {"volume.kubernetes.io/selected-node": "node02"}})
    assert claims_to_place(vmi(**HOTPLUGGED), {"c": chosen}, [WFFC]) == []
    assert claims_to_place(vmi(node="", **HOTPLUGGED), {"c": claim("local")}, [WFFC]) == []
    not_hotplugged = {"persistentVolumeClaim": {"claimName": "c"}}
    assert claims_to_place(vmi(**not_hotplugged), {"c": claim("local")}, [WFFC]) == []
    assert claims_to_place(vmi(**HOTPLUGGED), {}, [WFFC]) == []
