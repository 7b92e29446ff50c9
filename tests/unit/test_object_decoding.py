"""A write's body before admission: its kind and apiVersion, and a custom resource's schema pass per fieldValidation."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api.errors import APIError
from pykubevirt.apiserver.object_decoding import decode_object, schema_pass
from pykubevirt.apiserver.resources import Resource

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {"size": {"type": "integer", "default": 1}, "color": {"type": "string"}},
        },
    },
}
WIDGETS = Resource("example.com", "v1", "Widget", "widgets", "widget", True, SCHEMA)
OPEN_WIDGETS = Resource(
    "example.com", "v1", "Widget", "widgets", "widget", True, {**SCHEMA, "x-kubernetes-preserve-unknown-fields": True}
)


def test_a_body_without_kind_or_api_version_gets_the_resources() -> None:
    body = {"metadata": {"name": "w"}, "spec": {"color": "red"}}
    obj = decode_object(WIDGETS, body, "Strict", [], max_bytes=1024)
    assert obj == {**body, "apiVersion": "example.com/v1", "kind": "Widget"}
    assert body == {"metadata": {"name": "w"}, "spec": {"color": "red"}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "the request body must be a JSON object, not list"),
        (
            {"kind": "Gadget", "metadata": {}},
            "the kind in the data (Gadget) does not match the expected kind (Widget)",
        ),
        (
            {"kind": "Gadget", "apiVersion": "example.com/v2", "metadata": {}},
            "the API version in the data (example.com/v2) does not match the expected API version (example.com/v1)",
        ),
        (
            {"apiVersion": "example.com/v2", "metadata": {}},
            "the API version in the data (example.com/v2) does not match the expected API version (example.com/v1)",
        ),
    ],
)
def test_a_body_of_another_kind_or_version_is_a_bad_request(body: Any, message: str) -> None:
    with pytest.raises(APIError) as caught:
        decode_object(WIDGETS, body, "Strict", [], max_bytes=1024)
    assert (caught.value.code, caught.value.message) == (400, message)


def test_only_a_patched_object_is_held_to_the_size_limit() -> None:
    body = {"metadata": {"name": "w"}, "spec": {"color": "x" * 200}}
    assert decode_object(WIDGETS, body, "Strict", [], max_bytes=100)["spec"]["color"] == "x" * 200
    with pytest.raises(APIError) as caught:
        decode_object(WIDGETS, body, "Strict", [], max_bytes=100, patched=True)
    assert caught.value.code == 413


def test_unknown_fields_are_refused_warned_or_dropped_and_defaults_filled_in() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"shape": "round"}}
    with pytest.raises(APIError) as caught:
        schema_pass(WIDGETS, obj, "Strict", [])
    assert caught.value.message == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.shape"'
    )
    warnings: list[str] = []
    assert schema_pass(WIDGETS, obj, "Warn", warnings)["spec"] == {"size": 1}
    assert warnings == ['unknown field "spec.shape"']
    ignored: list[str] = []
    assert schema_pass(WIDGETS, obj, "Ignore", ignored)["spec"] == {"size": 1}
    assert ignored == []
    assert obj["spec"] == {"shape": "round"}


def test_a_schema_that_preserves_unknown_fields_leaves_the_object_alone() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"shape": "round"}}
    warnings: list[str] = []
    assert schema_pass(OPEN_WIDGETS, obj, "Strict", warnings) is obj
    assert warnings == []
