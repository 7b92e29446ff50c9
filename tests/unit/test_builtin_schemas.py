"""Built-in kinds decoded against Kubernetes' OpenAPI (kubernetes-validate's data), as kube-apiserver's decoder does."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api import errors
from pykubevirt.apiserver.builtin import BUILTIN_RESOURCES
from pykubevirt.apiserver.builtin_schemas import (
    decode_check,
    kind_node,
    typed_request_body,
    unknown_path,
    without_fields,
)
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.write_validation import decode_fields, validate_metadata


def configmap(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, **fields}


def type_error(obj: dict[str, Any], kind: str = "ConfigMap", group: str = "") -> str:
    node = kind_node(group, "v1", kind)
    assert node is not None
    error = decode_check(obj, node).type_error
    return error.message() if error else ""


def test_every_served_builtin_kind_has_kubernetes_schema() -> None:
    for resource in BUILTIN_RESOURCES:
        assert kind_node(resource.group, resource.version, resource.kind) is not None, resource.kind


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"name": 5}, "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.name of type string"),
        (
            {"name": "c", "finalizers": "a"},
            "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.finalizers of type []string",
        ),
        (
            {"name": "c", "labels": ["app"]},
            "json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type map[string]string",
        ),
        (
            {"name": "c", "ownerReferences": {"uid": "x"}},
            "json: cannot unmarshal object into Go struct field ObjectMeta.metadata.ownerReferences "
            "of type []v1.OwnerReference",
        ),
        (
            {"name": "c", "ownerReferences": ["x"]},
            "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.ownerReferences "
            "of type v1.OwnerReference",
        ),
        (
            {"generateName": 5},
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.generateName of type string",
        ),
        (
            {"name": "c", "generation": 1.5},
            "json: cannot unmarshal number 1.5 into Go struct field ObjectMeta.metadata.generation of type int64",
        ),
    ],
)
def test_metadata_of_the_wrong_type(metadata: dict[str, Any], message: str) -> None:
    assert type_error(configmap(metadata=metadata)) == message


def test_configmap_data_must_be_strings() -> None:
    assert (
        type_error(configmap(data={"a": 1}))
        == "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    )
    assert type_error(configmap(data={"a": "1", "b": None}, binaryData={"x": "AA=="})) == ""


def test_pod_fields_are_typed_through_nested_structs() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": 5}]}}
    assert (
        type_error(pod, "Pod")
        == "json: cannot unmarshal number into Go struct field Container.spec.containers.image of type string"
    )
    quantities = {"name": "c", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}, "ports": [{"containerPort": 80}]}
    assert type_error({"spec": {"containers": [quantities]}}, "Pod") == ""


def test_unknown_fields_are_found_at_every_level() -> None:
    node = kind_node("", "v1", "Pod")
    assert node is not None
    pod = {"spec": {"containers": [{"name": "c", "colour": "red"}]}, "extra": 1, "metadata": {"nope": 1}}
    found = [unknown_path(keys) for _, keys in decode_check(pod, node).unknown]
    assert found == ["spec.containers[0].colour", "extra", "metadata.nope"]


def test_what_an_update_left_as_the_checked_object_had_it_is_not_walked_again() -> None:
    node = kind_node("", "v1", "Pod")
    assert node is not None
    # A stored object that passed this check; the walk trusts it, so what it still holds here is not looked at.
    checked = {"spec": {"containers": [{"name": "c", "colour": "red"}], "volumes": [{"name": "v"}]}}
    pod = {"spec": {"containers": [{"name": "c", "colour": "red"}], "volumes": [{"name": "v", "shade": 1}]}}
    found = [unknown_path(keys) for _, keys in decode_check(pod, node, checked=checked).unknown]
    assert found == ["spec.volumes[0].shade"]
    assert len(decode_check(pod, node).unknown) == 2
    # Equal in Python, not in JSON: a boolean where the number was is walked, and refused.
    stored = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 1}]}]}}
    changed = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": True}]}]}}
    assert stored == changed
    error = decode_check(changed, node, checked=stored).type_error
    assert error is not None and error.go_type == "int32"


def test_without_fields_copies_only_the_way_to_the_dropped_fields() -> None:
    obj = {"a": {"b": 1, "c": 2}, "d": [{"e": 1, "f": 2}], "g": {"h": 1}}
    pruned = without_fields(obj, [["a", "b"], ["d", 0, "f"]])
    assert pruned == {"a": {"c": 2}, "d": [{"e": 1}], "g": {"h": 1}}
    assert obj == {"a": {"b": 1, "c": 2}, "d": [{"e": 1, "f": 2}], "g": {"h": 1}}
    assert pruned["g"] is obj["g"]


CONFIGMAPS = next(r for r in BUILTIN_RESOURCES if r.kind == "ConfigMap")
WIDGETS = Resource("example.com", "v1", "Widget", "widgets", "widget", True)


def test_decoding_a_builtin_drops_unknown_fields_with_a_warning() -> None:
    warnings: list[str] = []
    decoded = decode_fields(CONFIGMAPS, configmap(data={"a": "b"}, spec={"x": 1}), "Warn", warnings)
    assert "spec" not in decoded
    assert warnings == ['unknown field "spec"']


def test_decoding_a_builtin_strictly_rejects_unknown_fields() -> None:
    with pytest.raises(errors.APIError) as caught:
        decode_fields(CONFIGMAPS, configmap(spec={"x": 1}), "Strict", [])
    assert caught.value.code == 400
    assert caught.value.message == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "spec"'
    )


def test_decoding_a_builtin_rejects_wrong_types_with_400() -> None:
    with pytest.raises(errors.APIError) as caught:
        decode_fields(CONFIGMAPS, configmap(data={"a": 1}), "Warn", [])
    assert caught.value.code == 400
    assert caught.value.message == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: '
        "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    )


def test_an_update_drops_a_malformed_field_the_stored_object_already_had() -> None:
    stored = configmap(metadata={"name": "c", "labels": ["app"]}, data={"a": "b"})
    update = configmap(metadata={"name": "c", "labels": ["app"]}, data={"a": "c"})
    decoded = decode_fields(CONFIGMAPS, update, "Warn", [], old=stored)
    assert decoded["metadata"] == {"name": "c"}
    with pytest.raises(errors.APIError):
        decode_fields(CONFIGMAPS, configmap(data={"a": 1}), "Warn", [], old=stored)


def test_custom_resources_lose_malformed_metadata_fields() -> None:
    obj = {"metadata": {"name": "w", "labels": ["app"], "finalizers": "a", "annotations": {"a": "b"}}}
    assert decode_fields(WIDGETS, obj, "Warn", [])["metadata"] == {"name": "w", "annotations": {"a": "b"}}
    with pytest.raises(errors.APIError) as caught:
        decode_fields(WIDGETS, {"metadata": 5}, "Warn", [])
    assert caught.value.code == 400


def test_delete_options_are_typed() -> None:
    assert typed_request_body(None) is None
    assert typed_request_body({"gracePeriodSeconds": 0, "preconditions": {"uid": "u"}}) is not None
    for bad in ({"preconditions": "x"}, {"gracePeriodSeconds": "soon"}, {"orphanDependents": "yes"}, ["x"]):
        with pytest.raises(errors.APIError) as caught:
            typed_request_body(bad)
        assert caught.value.code == 400
        assert caught.value.message.startswith('DeleteOptions in version "v1" cannot be handled as a DeleteOptions')
    with pytest.raises(errors.APIError):
        typed_request_body({"deleteOptions": {"preconditions": 1}}, kind="Eviction")


def test_null_structs_maps_and_lists_are_dropped_and_null_scalars_kept() -> None:
    namespaces = next(r for r in BUILTIN_RESOURCES if r.kind == "Namespace")
    body = {"metadata": {"name": "n", "labels": None, "annotations": {"a": "b"}}, "spec": None}
    decoded = decode_fields(namespaces, body, "Warn", [])
    assert decoded == {"metadata": {"name": "n", "annotations": {"a": "b"}}}
    pods = next(r for r in BUILTIN_RESOURCES if r.kind == "Pod")
    condition = {"type": "Ready", "status": "True", "lastProbeTime": None}
    decoded = decode_fields(pods, {"metadata": {"name": "p"}, "status": {"conditions": [condition]}}, "Warn", [])
    assert decoded["status"]["conditions"] == [condition]


def test_metadata_rules_ratchet_on_update() -> None:
    stored = configmap(metadata={"name": "c", "namespace": "d", "labels": {"bad key": "v"}})
    validate_metadata(CONFIGMAPS, configmap(metadata={**stored["metadata"], "annotations": {"a": "b"}}), stored)
    with pytest.raises(errors.APIError) as caught:
        validate_metadata(CONFIGMAPS, configmap(metadata={**stored["metadata"], "finalizers": ["bad one"]}), stored)
    assert caught.value.code == 422
    assert [c["field"] for c in caught.value.details["causes"]] == ["metadata.finalizers"]


def test_an_update_leaving_the_checked_metadata_as_it_was_passes_but_a_negative_generation_does_not() -> None:
    stored = configmap(metadata={"name": "c", "namespace": "d", "generation": 1, "labels": {"bad key": "v"}})
    # A status write: only the generation, resourceVersion and managedFields change.
    unchanged = {**stored["metadata"], "generation": 2, "resourceVersion": "9", "managedFields": [{"manager": "m"}]}
    validate_metadata(CONFIGMAPS, configmap(metadata=unchanged), stored)
    with pytest.raises(errors.APIError) as caught:
        validate_metadata(CONFIGMAPS, configmap(metadata={**unchanged, "generation": -1}), stored)
    assert [c["field"] for c in caught.value.details["causes"]] == ["metadata.generation"]
    with pytest.raises(errors.APIError) as caught:
        validate_metadata(CONFIGMAPS, configmap(metadata={**unchanged, "labels": {"bad key": "v", "x": "a b"}}), stored)
    assert [c["field"] for c in caught.value.details["causes"]] == ["metadata.labels"]
