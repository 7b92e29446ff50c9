"""The object graph of a VM or VMI from plain objects: its nodes, their labels, and the options' filtering."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api.errors import APIError
from pykubevirt.virtapi.object_graph import filtered, launcher_pod_name, parse_options, vm_graph, vmi_graph

POD = {
    "metadata": {
        "name": "virt-launcher-web-abcde",
        "ownerReferences": [{"kind": "VirtualMachineInstance", "name": "web"}],
    }
}


def vm(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {
            "instancetype": {"kind": "VirtualMachineClusterInstancetype", "name": "u1.small"},
            "preference": {"kind": "VirtualMachinePreference", "name": "linux", "revisionName": "web-linux-1"},
            "template": {
                "spec": {
                    "accessCredentials": [{"sshPublicKey": {"source": {"secret": {"secretName": "keys"}}}}],
                    "volumes": [
                        {"name": "root", "dataVolume": {"name": "web-root"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}},
                        {"name": "boot", "containerDisk": {"image": "x"}},
                        {"name": "ci", "cloudInitNoCloud": {"userDataSecretRef": {"name": "ci-user"}}},
                        {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}},
                    ],
                    "networks": [{"name": "blue", "multus": {"networkName": "blue"}}],
                }
            },
        },
        "status": status,
    }


def flat(node: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    ref = node["objectReference"]
    found = [(ref["kind"], ref["name"], node["labels"]["kubevirt.io/dependency-type"], bool(node.get("optional")))]
    for child in node.get("children") or []:
        found += flat(child)
    return found


def test_a_running_vms_graph() -> None:
    status = {"created": True, "instancetypeRef": {"controllerRevisionRef": {"name": "web-u1.small-1"}}}
    root = vm_graph(vm(**status), [POD])
    assert flat(root) == [
        ("VirtualMachine", "web", "compute", False),
        ("VirtualMachineInstance", "web", "compute", False),
        ("Pod", "virt-launcher-web-abcde", "compute", False),
        ("VirtualMachineClusterInstancetype", "u1.small", "config", True),
        ("ControllerRevision", "web-u1.small-1", "config", False),
        ("VirtualMachinePreference", "linux", "config", True),
        # No preferenceRef in the status yet: the spec's revision.
        ("ControllerRevision", "web-linux-1", "config", False),
        ("Secret", "keys", "config", False),
        ("DataVolume", "web-root", "storage", False),
        ("PersistentVolumeClaim", "web-root", "storage", False),
        ("PersistentVolumeClaim", "web-data", "storage", False),
        ("Secret", "ci-user", "config", False),
        ("ServiceAccount", "default", "config", False),
        ("NetworkAttachmentDefinition", "blue", "network", True),
    ]
    cluster_scoped = root["children"][1]["objectReference"]
    assert cluster_scoped == {
        "apiGroup": "instancetype.kubevirt.io",
        "kind": "VirtualMachineClusterInstancetype",
        "name": "u1.small",
        "namespace": "",
    }
    # A stopped VM has no VMI in its graph.
    assert [kind for kind, *_ in flat(vm_graph(vm(), [POD]))][:2] == [
        "VirtualMachine",
        "VirtualMachineClusterInstancetype",
    ]


def test_a_vmis_graph_and_its_launcher_pod() -> None:
    vmi = {"metadata": {"name": "web", "namespace": "prod"}, "spec": vm()["spec"]["template"]["spec"]}
    assert flat(vmi_graph(vmi, [POD]))[:2] == [
        ("VirtualMachineInstance", "web", "compute", False),
        ("Pod", "virt-launcher-web-abcde", "compute", False),
    ]
    annotated = {"metadata": {"name": "old-pod", "annotations": {"kubevirt.io/domain": "web"}}}
    assert launcher_pod_name("web", [annotated]) == "old-pod"
    assert launcher_pod_name("other", [POD, annotated]) is None


def test_options_filter_every_level_but_the_root() -> None:
    root = vm_graph(vm(created=True), [POD])
    include, selector = parse_options(b'{"includeOptionalNodes": false}')
    assert all(not optional for *_, optional in flat(filtered(root, include, selector)))
    include, selector = parse_options(b'{"labelSelector": {"matchLabels": {"kubevirt.io/dependency-type": "storage"}}}')
    assert [kind for kind, *_ in flat(filtered(root, include, selector))] == [
        "VirtualMachine",
        "DataVolume",
        "PersistentVolumeClaim",
        "PersistentVolumeClaim",
    ]
    assert parse_options(b"") == (True, None)
    with pytest.raises(APIError, match="Can not unmarshal Request body"):
        parse_options(b"[1]")
