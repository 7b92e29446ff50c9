"""Server-side apply's pure parts on plain data: fieldsV1 sets, typed field sets, merge, managedFields, conflicts."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from pykubevirt.api import errors, json_codec
from pykubevirt.apiserver import fields_v1, managed_fields, protobuf, server_side_apply
from pykubevirt.apiserver.builtin import BUILTIN_RESOURCES
from pykubevirt.apiserver.field_sets import (
    difference,
    intersection,
    path_string,
    paths,
    recursive_difference,
    union,
)
from pykubevirt.apiserver.field_types import kind_type
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.typed_fields import compare, field_set, merge

CONFIG_MAPS = next(r for r in BUILTIN_RESOURCES if r.kind == "ConfigMap")
PODS = next(r for r in BUILTIN_RESOURCES if r.kind == "Pod")
CLAIMS = next(r for r in BUILTIN_RESOURCES if r.kind == "PersistentVolumeClaim")
T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"

# A custom resource whose structural schema uses every list and map type.
WIDGETS = Resource(
    "example.com",
    "v1",
    "Widget",
    "widgets",
    "widget",
    True,
    {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["port", "protocol"],
                        "items": {
                            "type": "object",
                            "properties": {
                                "port": {"type": "integer"},
                                "protocol": {"type": "string", "default": "TCP"},
                                "name": {"type": "string"},
                            },
                        },
                    },
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "selector": {
                        "type": "object",
                        "x-kubernetes-map-type": "atomic",
                        "additionalProperties": {"type": "string"},
                    },
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "size": {"type": "integer"},
                },
            },
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
        },
    },
    subresources=frozenset({"status"}),
)


def configmap(data: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", **meta}, "data": data}


def wire(obj: dict[str, Any]) -> Any:
    """The object as a client reads it (the server keeps field sets as their JSON text)."""
    return json.loads(json_codec.dumps(obj))


def entries(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """managedFields by (manager, operation), as a client reads them."""
    return {(e["manager"], e["operation"]): e for e in wire(obj)["metadata"].get("managedFields", [])}


def fields_of(obj: dict[str, Any], manager: str, operation: str = "Apply") -> Any:
    return entries(obj)[(manager, operation)]["fieldsV1"]


def track(
    resource: Resource,
    live: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    now: str = T0,
    *,
    subresource: str = "",
) -> dict[str, Any]:
    """An Update by `manager` (create when `live` is None), leaving the given objects untouched."""
    return managed_fields.track(resource, live, copy.deepcopy(new), manager=manager, now=now, subresource=subresource)


def apply(resource: Resource, live: dict[str, Any] | None, config: dict[str, Any], manager: str, **kw: Any) -> Any:
    return server_side_apply.apply(
        resource,
        live,
        config,
        manager=manager,
        subresource=kw.get("subresource", ""),
        force=kw.get("force", False),
        now=kw.get("now", T1),
    )


def conflict(excinfo: pytest.ExceptionInfo[errors.APIError]) -> tuple[int, str, list[dict[str, str]]]:
    return excinfo.value.code, excinfo.value.message, (excinfo.value.details or {})["causes"]


# --------------------------------------------------------------------------------------------------------- sets


def test_set_algebra_treats_dot_as_the_element_itself() -> None:
    a = {"f:data": {".": {}, "f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}
    b = {"f:data": {"f:a": {}}, "f:spec": {}}
    before = copy.deepcopy(a)
    assert union(a, b) == {**a, "f:spec": {}}
    assert union({"f:a": {}}, {"f:a": {"f:b": {}}}) == {"f:a": {".": {}, "f:b": {}}}
    assert intersection(a, b) == {"f:data": {"f:a": {}}}
    assert intersection({"f:a": {}}, {"f:a": {"f:b": {}}}) == {}
    assert difference(a, b) == {"f:data": {".": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}
    # Removing a member keeps its children (Set.Difference); a member left alone becomes a leaf again.
    assert difference(a, {"f:data": {}}) == {"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": a["f:metadata"]}
    assert difference({"f:data": {".": {}, "f:a": {}}}, {"f:data": {"f:a": {}}}) == {"f:data": {}}
    assert recursive_difference(a, {"f:data": {}}) == {"f:metadata": a["f:metadata"]}
    assert a == before, "sets are never changed in place"


def test_paths_print_as_structured_merge_diff_does() -> None:
    assert path_string(["f:spec", 'k:{"name":"a"}', "f:image"]) == '.spec[name="a"].image'
    assert (
        path_string(["f:ports", 'k:{"containerPort":80,"protocol":"TCP"}']) == '.ports[containerPort=80,protocol="TCP"]'
    )
    assert path_string(["f:metadata", "f:finalizers", 'v:"x"']) == '.metadata.finalizers[="x"]'
    assert path_string(["f:list", "i:3"]) == ".list[3]"
    nested = {"f:b": {}, "f:a": {"f:c": {}}, "f:d": {".": {}, "f:e": {}}}
    assert list(paths(nested)) == [["f:b"], ["f:d"], ["f:a", "f:c"], ["f:d", "f:e"]]


# --------------------------------------------------------------------------------------------------------- types


def test_field_set_of_a_pod_follows_kubernetes_openapi() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
        "spec": {
            "containers": [{"name": "c", "image": "i", "args": ["--v"], "ports": [{"containerPort": 80}]}],
            "imagePullSecrets": [{"name": "reg"}],
        },
    }
    assert field_set(pod, kind_type(PODS)) == {
        "f:apiVersion": {},
        "f:kind": {},
        "f:metadata": {"f:name": {}, "f:labels": {"f:a": {}}, "f:finalizers": {'v:"x"': {}}},
        "f:spec": {
            # Containers are keyed by name, ports by containerPort and protocol (defaulted to TCP), args atomic.
            "f:containers": {
                'k:{"name":"c"}': {
                    ".": {},
                    "f:name": {},
                    "f:image": {},
                    "f:args": {},
                    "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
                }
            },
            # LocalObjectReference is an atomic map: the item is owned as a whole.
            "f:imagePullSecrets": {'k:{"name":"reg"}': {}},
        },
    }
    claim = {"spec": {"selector": {"matchLabels": {"a": "b"}}, "resources": {"requests": {"storage": "1Gi"}}}}
    assert field_set(claim, kind_type(CLAIMS)) == {
        "f:spec": {"f:selector": {}, "f:resources": {"f:requests": {"f:storage": {}}}}
    }


def test_field_set_of_a_custom_resource_follows_its_structural_schema() -> None:
    widget = {
        "spec": {
            "ports": [{"port": 53, "protocol": "UDP", "name": "dns"}, {"port": 80}],
            "tags": ["a", "b"],
            "args": ["x"],
            "selector": {"app": "w"},
            "free": {"deep": {"er": 1}, "list": [1]},
            "size": 3,
        },
        "status": {"phase": "Up"},
    }
    assert field_set(widget, kind_type(WIDGETS)) == {
        "f:spec": {
            "f:ports": {
                'k:{"port":53,"protocol":"UDP"}': {".": {}, "f:port": {}, "f:protocol": {}, "f:name": {}},
                'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}},
            },
            "f:tags": {'v:"a"': {}, 'v:"b"': {}},
            "f:args": {},
            "f:selector": {},
            # Unknown fields are untyped: every map key is owned, lists as a whole.
            "f:free": {"f:deep": {".": {}, "f:er": {}}, "f:list": {}},
            "f:size": {},
        },
        "f:status": {"f:phase": {}},
    }


def test_compare_reports_added_modified_and_removed_fields() -> None:
    old = configmap({"a": "1", "b": "2"})
    new = configmap({"a": "9", "c": "3"}, labels={"x": "y"})
    added, modified, removed = compare(old, new, kind_type(CONFIG_MAPS))
    assert added == {"f:data": {"f:c": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}}
    assert modified == {"f:data": {"f:a": {}}}
    assert removed == {"f:data": {"f:b": {}}}
    assert compare(old, copy.deepcopy(old), kind_type(CONFIG_MAPS)) == ({}, {}, {})


def test_merge_places_keyed_items_as_structured_merge_diff_does() -> None:
    t = kind_type(PODS)
    live = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    config = {"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "2"}]}}
    merged = merge(live, config, t)
    assert merged["spec"]["containers"] == [
        {"name": "a", "image": "1"},
        {"name": "b", "image": "2"},
        {"name": "c", "image": "2"},
    ]
    reordered = merge(
        {"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}},
        {"spec": {"containers": [{"name": "c"}, {"name": "a"}]}},
        t,
    )
    assert [c["name"] for c in reordered["spec"]["containers"]] == ["b", "c", "a"]
    sets = merge({"metadata": {"finalizers": ["x", "y"]}}, {"metadata": {"finalizers": ["z", "x"]}}, t)
    assert sets["metadata"]["finalizers"] == ["z", "x", "y"]
    atomic = merge(
        {"spec": {"containers": [{"name": "a", "args": ["1", "2"]}]}},
        {"spec": {"containers": [{"name": "a", "args": ["3"]}]}},
        t,
    )
    assert atomic["spec"]["containers"] == [{"name": "a", "args": ["3"]}]
    assert merge(configmap({"a": "1", "b": "2"}), {"data": {"a": None}}, kind_type(CONFIG_MAPS))["data"] == {"b": "2"}


# --------------------------------------------------------------------------------------------------------- updates


def test_create_owns_everything_it_sets_except_identity() -> None:
    created = track(
        CONFIG_MAPS, None, configmap({"key": "a"}, namespace="ns", annotations={"n": "v"}), "kubectl-create"
    )
    assert wire(created)["metadata"]["managedFields"] == [
        {
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:annotations": {".": {}, "f:n": {}}},
                "f:data": {".": {}, "f:key": {}},
            },
        }
    ]


def test_update_moves_changed_fields_and_drops_removed_ones() -> None:
    created = track(CONFIG_MAPS, None, configmap({"key": "a", "other": "o"}), "creator")
    edited = track(CONFIG_MAPS, created, configmap({"key": "b", "other": "o"}), "kubectl-edit", T1)
    assert fields_of(edited, "creator", "Update") == {"f:data": {".": {}, "f:other": {}}}
    assert entries(edited)[("kubectl-edit", "Update")]["time"] == T1
    assert fields_of(edited, "kubectl-edit", "Update") == {"f:data": {"f:key": {}}}
    removed = track(CONFIG_MAPS, edited, configmap({"key": "b"}), "cleaner", T2)
    # Removing a field takes it from every manager; the remover gains nothing, so it gets no entry.
    assert fields_of(removed, "creator", "Update") == {"f:data": {}}
    assert ("cleaner", "Update") not in entries(removed)
    # A write that changes nothing leaves managedFields (and their times) as they were.
    again = track(CONFIG_MAPS, removed, removed, "someone", T2)
    assert wire(again)["metadata"]["managedFields"] == wire(removed)["metadata"]["managedFields"]


def test_status_writes_are_their_own_entries_and_main_writes_do_not_take_status() -> None:
    created = track(
        WIDGETS,
        None,
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}},
        "user",
    )
    with_status = track(
        WIDGETS, created, {**created, "status": {"phase": "Up"}}, "controller", T1, subresource="status"
    )
    status_entry = entries(with_status)[("controller", "Update")]
    assert status_entry["subresource"] == "status"
    assert status_entry["fieldsV1"] == {"f:status": {".": {}, "f:phase": {}}}
    main = track(WIDGETS, with_status, {**with_status, "status": {"phase": "Down"}}, "user", T2)
    assert fields_of(main, "user", "Update") == {"f:spec": {".": {}, "f:size": {}}}


def test_managers_are_named_by_field_manager_or_user_agent() -> None:
    agent = "kubectl/v1.32.4 (linux/amd64) kubernetes/4d1b6a7"
    assert managed_fields.manager_name("", agent) == "kubectl"
    assert managed_fields.manager_name("flux", agent) == "flux"
    assert managed_fields.manager_name("", "virt-controller") == "virt-controller"


def test_sent_managed_fields_replace_or_reset_the_stored_ones() -> None:
    created = track(CONFIG_MAPS, None, configmap({"a": "1"}), "creator")
    reset = track(
        CONFIG_MAPS, created, {**configmap({"a": "2"}), "metadata": {"name": "cm", "managedFields": []}}, "b", T1
    )
    assert list(entries(reset)) == [("b", "Update")]
    sent = [
        {
            "manager": "importer",
            "operation": "Apply",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}},
        }
    ]
    replaced = track(CONFIG_MAPS, created, {**created, "metadata": {"name": "cm", "managedFields": sent}}, "b", T1)
    assert fields_of(replaced, "importer") == {"f:data": {"f:a": {}}}
    broken = track(
        CONFIG_MAPS, created, {**created, "metadata": {"name": "cm", "managedFields": [{"manager": 5}]}}, "b", T1
    )
    assert wire(broken)["metadata"]["managedFields"] == wire(created)["metadata"]["managedFields"]


def test_sent_managed_fields_are_the_stored_ones_only_when_every_field_set_is_the_same() -> None:
    # Clients send back what they read: an unchanged list keeps the stored entries; one field set changed, with every
    # other field of every entry the same, still replaces them.
    created = track(CONFIG_MAPS, None, configmap({"a": "1", "b": "2"}), "creator")
    read = wire(created)
    kept = track(CONFIG_MAPS, created, {**read, "data": {"a": "1", "b": "2"}}, "other", T1)
    assert wire(kept)["metadata"]["managedFields"] == read["metadata"]["managedFields"]
    edited = copy.deepcopy(read)
    edited["metadata"]["managedFields"][0]["fieldsV1"] = {"f:data": {"f:a": {}}}
    replaced = track(CONFIG_MAPS, created, edited, "other", T1)
    assert fields_of(replaced, "creator", "Update") == {"f:data": {"f:a": {}}}


def test_at_most_ten_update_managers_are_kept() -> None:
    obj = track(CONFIG_MAPS, None, configmap({}), "m00")
    for i in range(1, 13):
        obj = track(
            CONFIG_MAPS, obj, configmap({**obj["data"], f"k{i}": "v"}), f"m{i:02d}", f"2026-01-01T00:00:{i:02d}Z"
        )
    managers = [e["manager"] for e in obj["metadata"]["managedFields"]]
    assert len(managers) == 10 and "ancient-changes" in managers
    ancient = entries(obj)[("ancient-changes", "Update")]["fieldsV1"]["f:data"]
    # The oldest four (m00 created `data`) share one entry, stamped with the newest of their times.
    assert set(ancient) == {".", "f:k1", "f:k2", "f:k3"}
    assert entries(obj)[("ancient-changes", "Update")]["time"] == "2026-01-01T00:00:03Z"


# --------------------------------------------------------------------------------------------------------- apply


def test_apply_creates_and_owns_its_configuration() -> None:
    created = apply(CONFIG_MAPS, None, configmap({"key": "a"}), "a")
    assert created["data"] == {"key": "a"}
    assert wire(created)["metadata"]["managedFields"] == [
        {
            "manager": "a",
            "operation": "Apply",
            "apiVersion": "v1",
            "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:key": {}}},
        }
    ]


def test_apply_conflicts_with_another_manager_until_forced() -> None:
    live = track(CONFIG_MAPS, None, configmap({"key": "a"}), "kubectl-client-side-apply")
    with pytest.raises(errors.APIError) as excinfo:
        apply(CONFIG_MAPS, live, configmap({"key": "b"}), "b")
    assert conflict(excinfo) == (
        409,
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.key',
        [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kubectl-client-side-apply" using v1',
                "field": ".data.key",
            }
        ],
    )
    assert excinfo.value.reason == "Conflict"
    forced = apply(CONFIG_MAPS, live, configmap({"key": "b"}), "b", force=True)
    assert forced["data"] == {"key": "b"}
    assert fields_of(forced, "b") == {"f:data": {"f:key": {}}}
    assert fields_of(forced, "kubectl-client-side-apply", "Update") == {"f:data": {}}


def test_several_conflicts_are_listed_by_manager() -> None:
    live = apply(CONFIG_MAPS, None, configmap({"k1": "a", "k2": "a"}), "a")
    live = apply(CONFIG_MAPS, live, configmap({"k1": "a", "k2": "a", "k3": "a"}, labels={"l": "x"}), "b")
    with pytest.raises(errors.APIError) as excinfo:
        apply(CONFIG_MAPS, live, configmap({"k1": "z", "k2": "z", "k3": "z"}), "c")
    code, message, causes = conflict(excinfo)
    assert code == 409
    assert message == (
        'Apply failed with 5 conflicts: conflicts with "a":\n- .data.k1\n- .data.k2\n'
        'conflicts with "b":\n- .data.k1\n- .data.k2\n- .data.k3'
    )
    assert [c["field"] for c in causes] == [".data.k1", ".data.k2", ".data.k1", ".data.k2", ".data.k3"]


def test_fields_dropped_from_the_configuration_are_removed_unless_someone_else_owns_them() -> None:
    live = apply(CONFIG_MAPS, None, configmap({"k": "v", "mine": "1"}, labels={"x": "1", "y": "2"}), "a")
    live = apply(CONFIG_MAPS, live, configmap({"k": "v"}), "b")  # co-owns k with the same value: no conflict
    live = apply(CONFIG_MAPS, live, configmap({}, labels={"x": "1"}), "a")
    assert live["data"] == {"k": "v"}
    assert live["metadata"]["labels"] == {"x": "1"}
    live = apply(CONFIG_MAPS, live, configmap({}), "b")
    assert "data" not in live or live["data"] == {}


def test_a_field_an_updater_took_over_stays_when_the_applier_drops_it() -> None:
    live = apply(CONFIG_MAPS, None, configmap({"k": "v"}), "a")
    live = track(CONFIG_MAPS, live, configmap({"k": "edited"}), "kubectl-edit", T1)
    live = apply(CONFIG_MAPS, live, configmap({}), "a", now=T2)
    assert live["data"] == {"k": "edited"}


def test_keyed_list_items_have_their_own_owners() -> None:
    def pod(*containers: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": c, "image": f"{c}:1"} for c in containers]},
        }

    live = apply(PODS, None, pod("one"), "a")
    live = apply(PODS, live, pod("two"), "b")
    assert [c["name"] for c in live["spec"]["containers"]] == ["one", "two"]
    with pytest.raises(errors.APIError) as excinfo:
        apply(PODS, live, {**pod("two"), "spec": {"containers": [{"name": "two", "image": "x"}]}}, "a")
    assert conflict(excinfo)[1] == 'Apply failed with 1 conflict: conflict with "b": .spec.containers[name="two"].image'
    live = apply(PODS, live, {**pod(), "spec": {"containers": []}}, "a")
    assert [c["name"] for c in live["spec"]["containers"]] == ["two"]


def test_applied_status_is_not_owned_through_the_main_resource() -> None:
    config = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1},
        "status": {"phase": "Up"},
    }
    applied = apply(WIDGETS, None, config, "a")
    assert fields_of(applied, "a") == {"f:spec": {"f:size": {}}}
    status = apply(WIDGETS, applied, {**config, "spec": {}, "status": {"phase": "Down"}}, "c", subresource="status")
    assert entries(status)[("c", "Apply")]["subresource"] == "status"
    assert fields_of(status, "c") == {"f:status": {"f:phase": {}}}


def test_identical_values_are_co_owned_without_a_new_time() -> None:
    live = apply(CONFIG_MAPS, None, configmap({"k": "v"}), "a")
    same = apply(CONFIG_MAPS, live, configmap({"k": "v"}), "b", now=T2)
    assert fields_of(same, "b") == {"f:data": {"f:k": {}}}
    assert "time" not in entries(same)[("b", "Apply")]
    assert entries(same)[("a", "Apply")]["time"] == T1


def test_kubectl_takes_over_what_client_side_apply_last_applied() -> None:
    annotation = server_side_apply.LAST_APPLIED
    last = json.dumps(configmap({"key": "a"}))
    live = track(
        CONFIG_MAPS, None, configmap({"key": "a"}, annotations={annotation: last}), "kubectl-client-side-apply"
    )
    with pytest.raises(errors.APIError):
        apply(CONFIG_MAPS, live, configmap({"key": "b"}), "someone-else")
    upgraded = apply(CONFIG_MAPS, live, configmap({"key": "b"}), "kubectl")
    assert upgraded["data"] == {"key": "b"}
    assert json.loads(upgraded["metadata"]["annotations"][annotation]) == configmap({"key": "b"})
    assert upgraded["metadata"]["annotations"][annotation].endswith("\n")


def test_applied_configurations_must_name_the_kind_and_carry_no_managed_fields() -> None:
    with pytest.raises(errors.APIError) as excinfo:
        apply(CONFIG_MAPS, None, {**configmap({}), "apiVersion": "v2"}, "a")
    assert (excinfo.value.code, excinfo.value.message) == (400, "invalid object type: /v2, Kind=ConfigMap")
    with pytest.raises(errors.APIError) as excinfo:
        apply(CONFIG_MAPS, None, configmap({}, managedFields=[]), "a")
    assert (excinfo.value.code, excinfo.value.message) == (400, "metadata.managedFields must be nil")


@pytest.mark.parametrize(
    ("options", "field_manager", "kwargs", "message", "cause"),
    [
        (
            "PatchOptions",
            "",
            {"apply": True},
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            {
                "reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch",
                "field": "fieldManager",
            },
        ),
        (
            "PatchOptions",
            "m",
            {"force": True},
            'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch',
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: may not be specified for non-apply patch",
                "field": "force",
            },
        ),
        (
            "CreateOptions",
            "m" * 129,
            {},
            'CreateOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more than 128 bytes',
            {
                "reason": "FieldValueTooLong",
                "message": "Too long: may not be more than 128 bytes",
                "field": "fieldManager",
            },
        ),
    ],
)
def test_request_options_are_checked_as_kube_does(
    options: str, field_manager: str, kwargs: dict[str, Any], message: str, cause: dict[str, str]
) -> None:
    with pytest.raises(errors.APIError) as excinfo:
        managed_fields.options_error(options, field_manager, **kwargs)
    assert (excinfo.value.code, excinfo.value.reason, excinfo.value.message) == (422, "Invalid", message)
    assert excinfo.value.details == {"group": "meta.k8s.io", "kind": options, "causes": [cause]}
    managed_fields.options_error(options, "kubectl")


def test_protobuf_bodies_carry_fields_v1_as_its_json() -> None:
    entry = {
        "manager": "importer",
        "operation": "Apply",
        "apiVersion": "v1",
        "time": T0,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:a": {}}},
    }
    body = configmap({"a": "1"}, managedFields=[entry])
    assert protobuf.decode(protobuf.encode(body))["metadata"]["managedFields"] == [entry]


def test_broken_stored_managed_fields_are_dropped_not_fatal() -> None:
    broken = configmap({"key": "a"})
    entry = {"manager": "old", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1"}
    broken["metadata"]["managedFields"] = [{**entry, "fieldsV1": {"f:data": 5}}]
    updated = track(CONFIG_MAPS, broken, configmap({"key": "b"}), "writer", T1)
    assert wire(updated)["metadata"]["managedFields"] == [
        {
            "manager": "writer",
            "operation": "Update",
            "apiVersion": "v1",
            "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:key": {}}},
        }
    ]
    # An apply does not trust them either: it starts afresh.
    applied = apply(CONFIG_MAPS, broken, configmap({"key": "c"}), "a")
    assert list(entries(applied)) == [("a", "Apply")]


def test_the_next_write_reads_the_field_sets_a_write_stored_without_decoding_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fields_v1, "_DECODED", {})  # no set left over from another test
    first = track(CONFIG_MAPS, None, configmap({"a": "1"}), "writer", T0)
    (entry,) = first["metadata"]["managedFields"]
    assert type(entry["fieldsV1"]) is bytes

    def no_decoding(text: bytes) -> Any:
        raise AssertionError(f"decoded again: {text!r}")

    # The set the text was made from is reused; a second writer then takes `a` from the first.
    with monkeypatch.context() as patched:
        patched.setattr(fields_v1.json_codec, "loads", no_decoding)
        second = track(CONFIG_MAPS, first, configmap({"a": "2", "b": "1"}), "other", T1)
    assert fields_of(second, "other", "Update") == {"f:data": {"f:a": {}, "f:b": {}}}
    assert "f:a" not in json.dumps(fields_of(second, "writer", "Update"))
