"""JSON Patch (RFC 6902) and JSON Merge Patch (RFC 7386) behave as the RFCs and Kubernetes require."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pykubevirt.api.json_patch import JSONPatchError, JSONPatchTestFailed, apply_patch, make_patch
from pykubevirt.api.merge_patch import apply_merge_patch, make_merge_patch
from pykubevirt.apiserver import patching

DOC = {"metadata": {"name": "vm", "labels": {"a/b": "1"}}, "spec": {"list": [1, 2, 3], "runStrategy": "Halted"}}


def test_add_replace_remove_move_copy() -> None:
    patch = [
        {"op": "add", "path": "/spec/list/1", "value": 9},
        {"op": "add", "path": "/spec/list/-", "value": 4},
        {"op": "replace", "path": "/spec/runStrategy", "value": "Always"},
        {"op": "remove", "path": "/metadata/labels/a~1b"},
        {"op": "copy", "from": "/metadata/name", "path": "/spec/copied"},
        {"op": "move", "from": "/spec/copied", "path": "/spec/moved"},
    ]
    result = apply_patch(DOC, patch)
    assert result["spec"]["list"] == [1, 9, 2, 3, 4]
    assert result["spec"]["runStrategy"] == "Always"
    assert result["metadata"]["labels"] == {}
    assert result["spec"]["moved"] == "vm" and "copied" not in result["spec"]
    assert DOC["spec"]["runStrategy"] == "Halted", "the input must not change"


def test_test_operation() -> None:
    assert apply_patch(DOC, [{"op": "test", "path": "/spec/runStrategy", "value": "Halted"}]) == DOC
    with pytest.raises(JSONPatchTestFailed):
        apply_patch(DOC, [{"op": "test", "path": "/spec/runStrategy", "value": "Always"}])
    with pytest.raises(JSONPatchTestFailed):
        apply_patch(DOC, [{"op": "test", "path": "/status/stateChangeRequests", "value": []}])


@pytest.mark.parametrize(
    "patch",
    [
        {"op": "add"},
        [{"op": "add", "path": "/spec/x"}],
        [{"op": "remove", "path": "/nope"}],
        [{"op": "replace", "path": "/spec/list/7", "value": 1}],
        [{"op": "frobnicate", "path": "/spec"}],
        [{"op": "add", "path": "spec", "value": 1}],
    ],
)
def test_bad_patches_are_errors(patch: object) -> None:
    with pytest.raises(JSONPatchError):
        apply_patch(DOC, patch)


def test_make_patch_round_trips() -> None:
    new = {"metadata": {"name": "vm", "finalizers": ["f"]}, "spec": {"list": [1], "runStrategy": "Halted"}}
    patch = make_patch(DOC, new)
    assert apply_patch(DOC, patch) == new
    assert make_patch(DOC, DOC) == []


def test_merge_patch() -> None:
    patch = {"metadata": {"labels": {"a/b": None, "c": "2"}}, "spec": {"list": [7]}}
    result = apply_merge_patch(DOC, patch)
    assert result["metadata"]["labels"] == {"c": "2"}
    assert result["spec"] == {"list": [7], "runStrategy": "Halted"}
    assert apply_merge_patch(DOC, make_merge_patch(DOC, result)) == result


def test_strategic_merge_keys_pod_conditions_and_ips_and_replaces_container_statuses_whole() -> None:
    waiting = [{"name": "compute", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]
    running = [{"name": "compute", "ready": True, "state": {"running": {"startedAt": "2026-12-05T10:00:00Z"}}}]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "status": {
            "conditions": [{"type": "gate", "status": "True"}, {"type": "Ready", "status": "False", "reason": "x"}],
            "containerStatuses": waiting,
            "podIPs": [{"ip": "10.0.0.2"}],
        },
    }
    patch = {
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": None}],
            "containerStatuses": running,
            "podIPs": [{"ip": "fd00::2"}],
        }
    }
    result = patching.apply(pod, patch, patching.STRATEGIC_MERGE_PATCH, builtin=True)["status"]
    # conditions merge by type (another writer's gate stays), podIPs by ip (PodStatus's patchMergeKeys) ...
    assert result["conditions"] == [{"type": "gate", "status": "True"}, {"type": "Ready", "status": "True"}]
    assert result["podIPs"] == [{"ip": "fd00::2"}, {"ip": "10.0.0.2"}]  # kube's order: the patch's new item first
    # ... while containerStatuses has none: the list is replaced, no `waiting` is left beside `running`.
    assert result["containerStatuses"] == running


def test_json_patch_copies_are_bounded_in_total() -> None:
    doc = {"a": "x" * 1000}
    ops = [{"op": "copy", "from": "/a", "path": f"/b{i}"} for i in range(5)]
    assert len(apply_patch(doc, ops, copy_limit=10_000)) == 6
    doubling = [{"op": "copy", "from": "", "path": "/c"}] * 40
    with pytest.raises(JSONPatchError, match="accumulated size increase of copy"):
        apply_patch(doc, doubling, copy_limit=100_000)
    with pytest.raises(JSONPatchError, match="maximum operations"):
        apply_patch(doc, [{"op": "test", "path": "/a", "value": doc["a"]}] * 10_001)


def test_a_patched_object_shares_nothing_with_the_stored_one() -> None:
    # The API server decodes a patch's result in place, so no patch type may hand back a part of the stored object.
    stored = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "1"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    before = json.dumps(stored)
    for patch_type, patch in (
        (patching.JSON_PATCH, [{"op": "add", "path": "/metadata/labels/b", "value": "2"}]),
        (patching.MERGE_PATCH, {"metadata": {"labels": {"b": "2"}}}),
        (patching.STRATEGIC_MERGE_PATCH, {"metadata": {"labels": {"b": "2"}}}),
    ):
        result = patching.apply(stored, patch, patch_type, builtin=True)
        result["metadata"]["name"] = "changed"
        result["spec"]["containers"][0]["image"] = "changed"
        result["metadata"]["labels"]["a"] = "changed"
        assert json.dumps(stored) == before, patch_type


SHARED_DOC = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "pod", "labels": {"app": "a"}},
    "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]},
    "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Scheduled", "status": "True"}]},
}

SHARING_PATCHES = [
    (patching.JSON_PATCH, [{"op": "add", "path": "/status/conditions/0", "value": {"type": "New", "status": "True"}}]),
    (patching.JSON_PATCH, [{"op": "replace", "path": "/status/conditions/1/status", "value": "True"}]),
    (patching.JSON_PATCH, [{"op": "remove", "path": "/spec/containers/0/env/0"}]),
    (patching.JSON_PATCH, [{"op": "move", "from": "/status", "path": ""}, {"op": "add", "path": "/x", "value": 1}]),
    (
        patching.JSON_PATCH,
        [
            {"op": "copy", "from": "/spec", "path": "/status/spec"},
            {"op": "test", "path": "/status/spec/containers/0/name", "value": "c"},
        ],
    ),
    (patching.JSON_PATCH, []),
    (patching.MERGE_PATCH, {"status": {"conditions": None, "phase": "Running"}, "metadata": {"labels": {"b": "2"}}}),
    (patching.MERGE_PATCH, {}),
    (patching.STRATEGIC_MERGE_PATCH, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
]


@pytest.mark.parametrize(("patch_type", "patch"), SHARING_PATCHES)
def test_a_sharing_patch_gives_the_copying_result_and_leaves_its_source_as_it_was(patch_type: str, patch: Any) -> None:
    source = json.loads(json.dumps(SHARED_DOC))
    copied = patching.apply(source, patch, patch_type, builtin=True)
    shared = patching.apply(source, patch, patch_type, builtin=True, share=True)
    assert shared == copied
    assert source == SHARED_DOC
    # The top level is the caller's own (the API server sets kind and apiVersion on it).
    shared["changed"] = True
    assert source == SHARED_DOC


def test_a_sharing_patch_shares_what_it_does_not_reach() -> None:
    source = json.loads(json.dumps(SHARED_DOC))
    patch = [{"op": "replace", "path": "/status/conditions/1/status", "value": "True"}]
    shared = patching.apply(source, patch, patching.JSON_PATCH, builtin=True, share=True)
    assert shared["spec"] is source["spec"] and shared["metadata"] is source["metadata"]
    assert shared["status"]["conditions"][0] is source["status"]["conditions"][0]
    assert shared["status"]["conditions"][1] is not source["status"]["conditions"][1]
    merged = apply_merge_patch(source, {"status": {"phase": "Running"}}, share=True)
    assert merged["spec"] is source["spec"] and merged["status"] is not source["status"]
    assert merged["status"]["conditions"] is source["status"]["conditions"]
