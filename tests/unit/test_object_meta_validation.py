"""apimachinery's ObjectMeta rules with kube-apiserver's field paths and messages."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.apiserver.object_meta_validation import (
    dns_label_name,
    dns_subdomain_name,
    go_quote,
    name_rule,
    object_meta_causes,
    path_segment_name,
)

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def causes(meta: dict[str, Any], *, namespaced: bool = True) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in object_meta_causes(meta, dns_subdomain_name, namespaced=namespaced)]


def test_a_valid_object_meta_has_no_causes() -> None:
    meta = {
        "name": "web-1.example",
        "namespace": "default",
        "labels": {"app.kubernetes.io/name": "web", "tier": ""},
        "annotations": {"Example.com/Note": "anything at all"},
        "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine", "orphan"],
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1"}],
    }
    assert causes(meta) == []


@pytest.mark.parametrize(
    "name",
    ["Upper", "ünicode", "nul\x00", "new\nline", "with space", "colon:name", "x" * 254, "-dash", "dot."],
)
def test_names_must_be_dns_subdomains(name: str) -> None:
    found = causes({"name": name, "namespace": "default"})
    assert found, name
    assert all(field == "metadata.name" for field, _ in found)
    assert found[-1][1].startswith(f"Invalid value: {go_quote(name)}: ")


def test_the_name_message_is_kube_apiservers() -> None:
    assert causes({"name": "Bad", "namespace": "default"}) == [
        ("metadata.name", f'Invalid value: "Bad": {SUBDOMAIN_MSG}')
    ]
    assert causes({"name": "x" * 300, "namespace": "default"})[0] == (
        "metadata.name",
        f'Invalid value: "{"x" * 300}": must be no more than 253 characters',
    )


def test_a_missing_name_is_required() -> None:
    assert causes({"namespace": "default"}) == [("metadata.name", "Required value: name or generateName is required")]


def test_generate_name_is_checked_as_a_prefix() -> None:
    assert causes({"generateName": "web-", "name": "web-x7k2p", "namespace": "default"}) == []
    found = causes({"generateName": "Web-", "name": "web-x7k2p", "namespace": "default"})
    assert [f for f, _ in found] == ["metadata.generateName"]
    assert found[0][1].startswith('Invalid value: "Web-": a lowercase RFC 1123 subdomain')


def test_namespaces_are_dns_labels() -> None:
    assert [f for f, _ in causes({"name": "a", "namespace": "n" * 64})] == ["metadata.namespace"]
    found = causes({"name": "a", "namespace": "with.dots"})
    assert found == [("metadata.namespace", 'Invalid value: "with.dots": must not contain dots')]
    assert causes({"name": "a"}, namespaced=True) == [("metadata.namespace", "Required value")]
    assert causes({"name": "a", "namespace": "x"}, namespaced=False) == [
        ("metadata.namespace", "Forbidden: not allowed on this type")
    ]


def test_namespace_objects_are_named_as_dns_labels() -> None:
    rule = name_rule("", "Namespace")
    assert rule is dns_label_name
    assert rule("a" * 64, False) == ["must be no more than 63 characters"]
    assert rule("a.b", False) == ["must not contain dots"]


def test_rbac_names_only_need_to_be_path_segments() -> None:
    assert name_rule("rbac.authorization.k8s.io", "ClusterRole") is path_segment_name
    assert path_segment_name("system:controller:x", False) == []
    assert path_segment_name("..", False) == ["may not be '..'"]
    assert path_segment_name("a/b%c", False) == ["may not contain '/'", "may not contain '%'"]


def test_core_events_skip_object_meta_validation() -> None:
    assert name_rule("", "Event") is None
    assert name_rule("", "ConfigMap") is dns_subdomain_name


def test_label_keys_and_values() -> None:
    found = causes({"name": "a", "namespace": "d", "labels": {"bad key": "ok", "k": "v" * 64, "ok": "-bad"}})
    assert [f for f, _ in found] == ["metadata.labels"] * 3
    assert found[0][1].startswith('Invalid value: "bad key": name part must consist of alphanumeric characters')
    assert found[1][1] == f'Invalid value: "{"v" * 64}": must be no more than 63 characters'
    assert found[2][1].startswith('Invalid value: "-bad": a valid label must be an empty string or consist of')


def test_annotations_are_limited_to_256_kib_in_total() -> None:
    at_limit = {"a": "x" * (256 * 1024 - 1)}
    assert causes({"name": "a", "namespace": "d", "annotations": at_limit}) == []
    over = {"a": "x" * (150 * 1024), "b": "x" * (150 * 1024)}
    assert causes({"name": "a", "namespace": "d", "annotations": over}) == [
        ("metadata.annotations", "Too long: may not be more than 262144 bytes")
    ]
    assert [f for f, _ in causes({"name": "a", "namespace": "d", "annotations": {"no spaces": ""}})] == [
        "metadata.annotations"
    ]


def test_finalizers_are_qualified_names_and_not_both_orphan_and_foreground() -> None:
    found = causes({"name": "a", "namespace": "d", "finalizers": ["bad finalizer"]})
    assert [f for f, _ in found] == ["metadata.finalizers"]
    found = causes({"name": "a", "namespace": "d", "finalizers": ["orphan", "foregroundDeletion"]})
    assert found == [
        (
            "metadata.finalizers",
            'Invalid value: ["orphan","foregroundDeletion"]: '
            "finalizer orphan and foregroundDeletion cannot be both set",
        )
    ]


def test_owner_references_need_api_version_kind_name_and_uid() -> None:
    found = causes({"name": "a", "namespace": "d", "ownerReferences": [{"apiVersion": "a/b/c"}]})
    assert found == [
        ("metadata.ownerReferences.apiVersion", 'Invalid value: "a/b/c": version must not be empty'),
        ("metadata.ownerReferences.kind", 'Invalid value: "": must not be empty'),
        ("metadata.ownerReferences.name", 'Invalid value: "": must not be empty'),
        ("metadata.ownerReferences.uid", 'Invalid value: "": must not be empty'),
    ]


def test_only_one_owner_reference_may_be_the_controller() -> None:
    ref = {"apiVersion": "v1", "kind": "Pod", "uid": "u", "controller": True}
    found = causes({"name": "a", "namespace": "d", "ownerReferences": [{**ref, "name": "x"}, {**ref, "name": "y"}]})
    assert len(found) == 1
    assert found[0][0] == "metadata.ownerReferences"
    assert found[0][1].endswith(
        'Only one reference can have Controller set to true. Found "true" in references for Pod/x and Pod/y'
    )


def test_go_quote_escapes_what_go_escapes() -> None:
    assert go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert go_quote("nul\x00 nl\n tab\t") == '"nul\\x00 nl\\n tab\\t"'
    assert go_quote("ünicode") == '"ünicode"'
