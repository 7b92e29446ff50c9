"""kube-apiserver's strategic merge patch on built-in kinds, by their published patch strategies and merge keys."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from pykubevirt.api import errors
from pykubevirt.apiserver import patching
from pykubevirt.apiserver.patch_meta import schema_for

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "finalizers": ["a", "b"], "labels": {"app": "x", "tier": "web"}},
    "spec": {
        "containers": [
            {"name": "compute", "image": "i", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "sidecar", "image": "j"},
        ],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    },
}


def smp(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    before = json.dumps(obj)
    sent = copy.deepcopy(patch)
    result = patching.apply(obj, patch, patching.STRATEGIC_MERGE_PATCH, builtin=True)
    assert json.dumps(obj) == before and patch == sent, "a patch may change neither the object nor itself"
    return result


def names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [item[key] for item in items]


def test_finalizers_merge_as_a_set_and_leave_by_the_deletion_list() -> None:
    # ObjectMeta.finalizers is `patchStrategy: merge` without a key: the patch's values join the stored ones.
    assert smp(POD, {"metadata": {"finalizers": ["c", "a"]}})["metadata"]["finalizers"] == ["c", "a", "b"]
    gone = smp(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zzz"]}})
    assert gone["metadata"]["finalizers"] == ["b"]
    # A deletion list for a list the object lacks adds nothing.
    assert "finalizers" not in smp({**POD, "metadata": {"name": "p"}}, {"metadata": {DELETE_LIST: ["a"]}})["metadata"]


DELETE_LIST = "$deleteFromPrimitiveList/finalizers"


def test_a_map_is_replaced_or_deleted_by_its_patch_directive() -> None:
    replaced = smp(POD, {"metadata": {"labels": {"$patch": "replace", "only": "this"}}})
    assert replaced["metadata"]["labels"] == {"only": "this"}
    deleted = smp(POD, {"metadata": {"labels": {"$patch": "delete"}}})
    assert deleted["metadata"]["labels"] == {}
    merged = smp(POD, {"metadata": {"labels": {"tier": None, "new": "1"}}})
    assert merged["metadata"]["labels"] == {"app": "x", "new": "1"}


def test_keyed_lists_merge_by_key_and_take_delete_and_replace_items() -> None:
    patched = smp(POD, {"spec": {"containers": [{"name": "compute", "env": [{"name": "B", "value": "3"}]}]}})
    compute = patched["spec"]["containers"][0]
    assert names(patched["spec"]["containers"]) == ["compute", "sidecar"]
    assert compute["image"] == "i" and compute["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]

    dropped = smp(POD, {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}})
    assert names(dropped["spec"]["containers"]) == ["compute"]

    whole = smp(POD, {"spec": {"containers": [{"name": "only", "image": "k"}, {"$patch": "replace"}]}})
    assert whole["spec"]["containers"] == [{"name": "only", "image": "k"}]


def test_a_new_item_comes_first_unless_an_element_order_places_it() -> None:
    # Without an order, kube puts a patch's new items before the ones only the server has.
    added = smp(POD, {"spec": {"containers": [{"name": "new", "image": "n"}]}})
    assert names(added["spec"]["containers"]) == ["new", "compute", "sidecar"]
    ordered = smp(
        POD,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "compute"}, {"name": "new"}],
                "containers": [{"name": "new", "image": "n"}],
            }
        },
    )
    # The order puts new after compute; sidecar, the server's own, follows what it cannot be ordered against.
    assert names(ordered["spec"]["containers"]) == ["compute", "new", "sidecar"]


def test_element_order_sees_the_server_list_as_kube_merge_left_it() -> None:
    # kubectl apply: port 443 removed, 8080 added, 9090 added by another writer. kube's merge deletes and appends in
    # the stored list's own array (9090 moves up into 443's slot, 8080 takes the last), and the final ordering reads
    # that array, so the server's 9090 stays before 8080.
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "spec": {"ports": [{"port": 80}, {"port": 443}, {"port": 9090}]},
    }
    patch = {
        "spec": {
            "$setElementOrder/ports": [{"port": 80}, {"port": 8080}],
            "ports": [{"port": 8080, "name": "alt"}, {"port": 443, "$patch": "delete"}],
        }
    }
    assert names(smp(svc, patch)["spec"]["ports"], "port") == [80, 9090, 8080]


def test_retain_keys_clears_the_fields_a_volume_no_longer_has() -> None:
    # Volume is `merge,retainKeys`: kubectl apply switching emptyDir to hostPath lists the keys to keep.
    volume = {"name": "scratch", "hostPath": {"path": "/x"}, "$retainKeys": ["hostPath", "name"]}
    patch = {"spec": {"volumes": [volume]}}
    assert smp(POD, patch)["spec"]["volumes"] == [{"name": "scratch", "hostPath": {"path": "/x"}}]


def test_a_replace_strategy_map_is_taken_whole() -> None:
    # PodDisruptionBudgetSpec.selector is `patchStrategy: replace`.
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "1"}}},
    }
    patched = smp(pdb, {"spec": {"selector": {"matchExpressions": []}}})
    assert patched["spec"] == {"minAvailable": 1, "selector": {"matchExpressions": []}}


def test_a_list_without_strategy_is_replaced_and_new_values_drop_their_nulls() -> None:
    pod = {**POD, "status": {"containerStatuses": [{"name": "compute", "ready": False}]}}
    patched = smp(pod, {"status": {"containerStatuses": [{"name": "compute", "ready": True, "state": None}]}})
    assert patched["status"]["containerStatuses"] == [{"name": "compute", "ready": True}]
    fresh = smp(POD, {"spec": {"nodeSelector": {"zone": "a", "rack": None}}})
    assert fresh["spec"]["nodeSelector"] == {"zone": "a"}


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        ({"metadata": {"labels": {"$patch": "merge"}}}, 400, "unknown patch type: merge in map: map[$patch:merge]"),
        ({"spec": {"containers": [{"image": "x"}]}}, 400, "map: map[image:x] does not contain declared merge key"),
        ({"spec": {"containers": [{"name": "c", "$patch": "merge"}]}}, 400, "merging lists cannot yet be specified"),
        ({"metadata": {"finalizers": [1]}}, 400, "list element types are not identical: [[a b] [1]]"),
        ({"metadata": {"$deleteFromPrimitiveList": ["a"]}}, 400, "invalid patch format of primitive list"),
        ({"spec": {"$retainKeys": ["containers"], "volumes": []}}, 400, "invalid patch format of retainKeys"),
        ({"spec": {"$setElementOrder/containers": {}}}, 400, "expected a []interface {}, but received a map"),
        (
            {"spec": {"$setElementOrder/containers": [{"name": "compute"}], "containers": [{"name": "x"}]}},
            400,
            "doesn't match $setElementOrder list",
        ),
    ],
)
def test_a_patch_kube_refuses_is_a_client_error_with_kubes_message(
    patch: dict[str, Any], code: int, message: str
) -> None:
    with pytest.raises(errors.APIError) as refused:
        smp(POD, patch)
    assert refused.value.code == code
    assert message in refused.value.message


def test_a_list_of_lists_is_unprocessable() -> None:
    with pytest.raises(errors.APIError) as refused:
        smp({**POD, "metadata": {"name": "p", "finalizers": []}}, {"metadata": {"finalizers": [["x"]]}})
    assert (refused.value.code, refused.value.message) == (422, "lists of lists are not supported")


def test_kinds_kube_does_not_publish_merge_maps_and_replace_lists() -> None:
    schema = schema_for("pykubevirt.io/v1", "Nothing")
    sub, meta = schema.for_slice("containers")
    assert meta.merge_key == "" and meta.strategies == ()
    assert sub.for_struct("anything")[1].strategies == ()
