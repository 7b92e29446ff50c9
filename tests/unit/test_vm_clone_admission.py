"""KubeVirt's VirtualMachineClone admitter and create mutator on plain data: the messages and field paths of
vmclone-admitter.go and clone-create-mutator.go, their cases from KubeVirt's unit tests, and the clone CRD."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from pykubevirt.admission import chain
from pykubevirt.admission.causes import AdmissionRejected, RequestDenied
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.clone_mutator import go_encoded_spec, mutate_vm_clone, random_target_suffix
from pykubevirt.admission.review import review
from pykubevirt.admission.validation import REQUEST_ERROR, validate_vm_clone
from pykubevirt.api.causes import Cause
from pykubevirt.api.crd import crd_manifest
from pykubevirt.api.kinds import VIRTUAL_MACHINE_CLONE, kind_for
from pykubevirt.config.cluster_config import ClusterConfig

INVALID = "FieldValueInvalid"
VM_REF = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine"}
SNAPSHOT_REF = {"apiGroup": "snapshot.kubevirt.io", "kind": "VirtualMachineSnapshot"}


def ctx(*, gate: bool = True) -> AdmissionContext:
    disabled = frozenset() if gate else frozenset({"Snapshot"})
    return AdmissionContext(config=ClusterConfig(disabled_feature_gates=disabled))


def clone(*, source: Any = None, target: Any = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"source": source if source is not None else {**VM_REF, "name": "source-vm"}, **spec}
    if target is not None:
        body["target"] = target
    return {
        "apiVersion": "clone.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClone",
        "metadata": {"name": "testclone", "namespace": "default"},
        "spec": body,
    }


def legal() -> dict[str, Any]:
    return clone(target={**VM_REF, "name": "target-vm"})


def causes_of(obj: dict[str, Any]) -> list[tuple[str, str]]:
    found = validate_vm_clone(obj, ctx())
    assert all(c.type == INVALID for c in found)
    return [(c.field, c.message) for c in found]


def test_a_legal_clone_of_a_vm_or_a_snapshot_is_admitted() -> None:
    assert validate_vm_clone(legal(), ctx()) == []
    assert validate_vm_clone(clone(source={**SNAPSHOT_REF, "name": "snap"}), ctx()) == []
    # KubeVirt no longer looks the source up: a VM that does not exist is the controller's concern.
    assert validate_vm_clone(clone(source={**VM_REF, "name": "vm-that-doesnt-exist"}), ctx()) == []


def test_the_snapshot_gate_is_needed_to_create_not_to_update() -> None:
    assert validate_vm_clone(legal(), ctx(gate=False)) == [
        Cause(REQUEST_ERROR, "snapshot feature gate is not enabled", "")
    ]
    assert validate_vm_clone(legal(), ctx(gate=False), creating=False) == []
    with pytest.raises(RequestDenied) as denied:
        chain.validate(legal(), ctx(gate=False))
    assert denied.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'admission webhook "vm-clone-validator.kubevirt.io" denied the request: '
        "snapshot feature gate is not enabled",
        "code": 400,
    }


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({**VM_REF, "name": ""}, [("spec.Source.Name", "Source's name cannot be empty")]),
        (
            {"apiGroup": "kubevirt.io", "kind": "", "name": "vm"},
            [("spec.Source.Kind", "Source kind is not supported"), ("spec.Source", "Source's Kind cannot be empty")],
        ),
        ({"kind": "VirtualMachine", "name": "vm"}, [("spec.Source.APIGroup", "Source's APIGroup cannot be empty")]),
        (
            {"apiGroup": "", "kind": "VirtualMachine", "name": "vm"},
            [("spec.Source.APIGroup", "Source's APIGroup cannot be empty")],
        ),
        (
            {"apiGroup": "kubevirt.io", "kind": "Foobar", "name": "vm"},
            [("spec.Source.Kind", "Source kind is not supported")],
        ),
    ],
    ids=["no name", "no kind", "no apiGroup", "empty apiGroup", "bad kind"],
)
def test_a_source_lacking_information_is_refused(source: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert causes_of(clone(source=source, target={**VM_REF, "name": "target"})) == expected


def test_only_a_vm_target_and_not_the_source_vm_itself() -> None:
    assert causes_of(clone(target={"apiGroup": "kubevirt.io", "kind": "Pod", "name": "t"})) == [
        ("spec.Target.Kind", "Target kind is not supported")
    ]
    same = clone(target={**VM_REF, "name": "source-vm"})
    assert causes_of(same) == [
        ("spec.target.name", "Target name cannot be equal to source name when both are VirtualMachines")
    ]
    # A snapshot's name may be the new VM's.
    assert causes_of(clone(source={**SNAPSHOT_REF, "name": "x"}, target={**VM_REF, "name": "x"})) == []


@pytest.mark.parametrize("good", ["mykey/something", "*", "mykey/something*", "!mykey/something", "a"])
def test_filters_kubevirt_allows(good: str) -> None:
    obj = clone(labelFilters=[good], annotationFilters=[good], template={"labelFilters": [good]})
    assert causes_of(obj) == []


def test_filters_name_the_metadata_they_filter_in_each_message() -> None:
    obj = clone(
        annotationFilters=["!"],
        labelFilters=["mykey/!something"],
        template={"annotationFilters": ["*mykey/something"], "labelFilters": ["my*key!"]},
    )
    negation = "NegationChar can be only used at the beginning of the filter"
    wildcard = "WildcardChar can be only at the end of the filter"
    assert causes_of(obj) == [
        ("spec.annotations", "a negation character is not a valid filter"),
        (
            "spec.labels",
            f"spec.labels filter mykey/!something is invalid: cannot contain a negation character (!); "
            f"FilterRules: {negation}",
        ),
        (
            "spec.template.annotations",
            f"spec.template.annotations filter *mykey/something is invalid: cannot contain a wildcard character (*); "
            f"FilterRules: {wildcard}",
        ),
        (
            "spec.template.labels",
            f"spec.template.labels filter my*key! is invalid: cannot contain a negation character (!); "
            f"FilterRules: {negation}",
        ),
        (
            "spec.template.labels",
            f"spec.template.labels filter my*key! is invalid: cannot contain a wildcard character (*); "
            f"FilterRules: {wildcard}",
        ),
    ]


@pytest.mark.parametrize(
    ("mac", "allowed"),
    [("00:00:00:00:00:00", True), ("DE-AD-00-FF-FF-FF", True), ("", True), ("00:00:00:00:00", False)],
)
def test_new_mac_addresses(mac: str, allowed: bool) -> None:
    found = causes_of(clone(newMacAddresses={"default": mac}))
    expected = (
        [] if allowed else [("spec.newMacAddresses.default", f"interface default has malformed MAC address ({mac}).")]
    )
    assert found == expected


def test_a_too_long_mac_is_called_malformed_too() -> None:
    mac = "00:00:00:00:00:00:00:00"
    assert causes_of(clone(newMacAddresses={"eth0": mac})) == [
        ("spec.newMacAddresses.eth0", f"interface eth0 has malformed MAC address ({mac}).")
    ]


def test_patches_must_be_json() -> None:
    good = '{"op":"replace","path":"/spec/template/spec/domain/devices/interfaces/0/macAddress","value":"DE-AD"}'
    bad = '{"op": "replace" "path": "/spec/x", "value": 1}'
    assert causes_of(clone(patches=[good, bad, "NaN", " [1] "])) == [
        ("spec.patches[1]", f"patch is not valid JSON ({bad})"),
        ("spec.patches[2]", "patch is not valid JSON (NaN)"),
    ]


def test_the_chain_answers_422_with_causes() -> None:
    with pytest.raises(AdmissionRejected) as rejected:
        chain.validate(clone(target={**VM_REF, "name": "source-vm"}), ctx())
    status = rejected.value.status()
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"] == (
        'admission webhook "vm-clone-validator.kubevirt.io" denied the request: '
        "Target name cannot be equal to source name when both are VirtualMachines"
    )
    assert status["details"]["causes"] == [
        {
            "reason": INVALID,
            "message": "Target name cannot be equal to source name when both are VirtualMachines",
            "field": "spec.target.name",
        }
    ]


# --- the create mutator ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ({**VM_REF, "name": "test-source-vm"}, None),
        ({**VM_REF, "name": "test-source-vm"}, {**VM_REF, "name": ""}),
        ({**SNAPSHOT_REF, "name": "test-snapshot"}, None),
        ({**SNAPSHOT_REF, "name": "test-snapshot"}, {**VM_REF, "name": ""}),
    ],
)
def test_the_mutator_names_a_missing_target(source: dict[str, Any], target: dict[str, Any] | None) -> None:
    obj = clone(source=source, target=target)
    mutate_vm_clone(obj, operation="CREATE", suffix="12345")
    # KubeVirt replaces the whole spec with its Go encoding, so the empty template appears too.
    assert obj["spec"] == {
        "source": source,
        "target": {**VM_REF, "name": f"clone-{source['name']}-12345"},
        "template": {},
    }


def test_the_mutator_leaves_a_named_target_and_updates_alone() -> None:
    obj = legal()
    mutate_vm_clone(obj, operation="CREATE")
    assert obj == legal()
    unnamed = clone()
    mutate_vm_clone(unnamed, operation="UPDATE")
    assert unnamed == clone()


def test_the_mutator_keeps_an_unnamed_targets_kind_and_a_random_suffix_each_time() -> None:
    obj = clone(target={"kind": "Pod", "name": ""}, labelFilters=[], newSMBiosSerial="s", patches=["{}"])
    mutate_vm_clone(obj, operation="CREATE", suffix="abcde")
    assert obj["spec"] == {
        "source": {**VM_REF, "name": "source-vm"},
        "target": {"kind": "Pod", "name": "clone-source-vm-abcde"},
        "template": {},
        "newSMBiosSerial": "s",
        "patches": ["{}"],
    }
    suffixes = {random_target_suffix() for _ in range(20)}
    assert len(suffixes) > 1 and all(len(s) == 5 and set(s) <= set("bcdfghjklmnpqrstvwxz2456789") for s in suffixes)


def test_go_encoding_drops_empty_lists_and_maps() -> None:
    spec = {
        "source": {"kind": "VirtualMachine", "name": "a"},
        "annotationFilters": [],
        "labelFilters": ["*"],
        "newMacAddresses": {},
        "template": {"labelFilters": ["x"], "annotationFilters": []},
        "volumeNamePolicy": "PrefixTargetName",
    }
    assert go_encoded_spec(spec) == {
        "source": {"kind": "VirtualMachine", "name": "a"},
        "labelFilters": ["*"],
        "template": {"labelFilters": ["x"]},
        "volumeNamePolicy": "PrefixTargetName",
    }


def test_the_mutating_webhook_answers_a_json_patch_and_checks_types_first() -> None:
    request = {"kind": "AdmissionReview", "request": {"uid": "u", "operation": "CREATE", "object": clone()}}
    answer = review(request, ctx(), mutating=True)["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/template", "value": {}} in patch
    (target,) = [op for op in patch if op["path"] == "/spec/target"]
    assert target["value"]["name"].startswith("clone-source-vm-")
    wrong = clone(newSMBiosSerial=5)
    with pytest.raises(AdmissionRejected) as rejected:
        chain.mutate(wrong, ctx())
    assert rejected.value.webhook == "virtualmachineclones-mutator.kubevirt.io"
    assert "spec.newSMBiosSerial" in str(rejected.value)


# --- the CRD ---------------------------------------------------------------------------------------------------------


def test_the_crd_is_kubevirts() -> None:
    crd = crd_manifest(VIRTUAL_MACHINE_CLONE)
    assert crd["metadata"]["name"] == "virtualmachineclones.clone.kubevirt.io"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (
        "VirtualMachineClone",
        "virtualmachineclones",
        "virtualmachineclone",
    )
    assert names["shortNames"] == ["vmclone", "vmclones"] and names["categories"] == ["all"]
    versions = crd["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"], v.get("deprecated", False)) for v in versions] == [
        ("v1beta1", True, True, False),
        ("v1alpha1", True, False, False),
    ]
    assert [(c["name"], c["jsonPath"]) for c in versions[0]["additionalPrinterColumns"]] == [
        ("Phase", ".status.phase"),
        ("SourceVirtualMachine", ".spec.source.name"),
        ("TargetVirtualMachine", ".spec.target.name"),
    ]
    assert versions[0]["subresources"] == {"status": {}}
    schema = versions[0]["schema"]["openAPIV3Schema"]
    assert schema["required"] == ["spec"] and schema["properties"]["spec"]["required"] == ["source"]
    assert schema["properties"]["spec"]["properties"]["volumeNamePolicy"]["enum"] == [
        "RandomizeNames",
        "PrefixTargetName",
    ]
    assert kind_for("clone.kubevirt.io/v1beta1", "VirtualMachineClone") is VIRTUAL_MACHINE_CLONE
    assert chain.handles("VirtualMachineClone")
