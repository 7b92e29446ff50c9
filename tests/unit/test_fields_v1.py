"""managedFields' field sets are kept as their JSON text (kube-apiserver's FieldsV1.Raw): one untracked object an entry
instead of a tree of dicts, with the same JSON on the wire, after a restart, and for clients that send them back."""

from __future__ import annotations

import copy
import gc
import json
from pathlib import Path
from typing import Any

from pykubevirt.api import json_codec
from pykubevirt.apiserver import managed_fields
from pykubevirt.apiserver.builtin import BUILTIN_RESOURCES
from pykubevirt.apiserver.patching import JSON_PATCH, MERGE_PATCH, apply
from pykubevirt.apiserver.store import Store

CONFIG_MAPS = next(r for r in BUILTIN_RESOURCES if r.kind == "ConfigMap")
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"


def configmap(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}, "data": data}


def track(live: dict[str, Any] | None, new: dict[str, Any], manager: str, now: str = T0) -> dict[str, Any]:
    return managed_fields.track(CONFIG_MAPS, live, copy.deepcopy(new), manager=manager, now=now, subresource="")


def wire(obj: dict[str, Any]) -> Any:
    return json.loads(json_codec.dumps(obj))


def test_a_field_set_is_stored_as_one_untracked_text_and_answered_as_its_json() -> None:
    created = track(None, configmap({"key": "a"}), "creator")
    [entry] = created["metadata"]["managedFields"]
    assert isinstance(entry["fieldsV1"], bytes)
    assert not gc.is_tracked(entry["fieldsV1"])
    assert wire(created)["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {".": {}, "f:key": {}}}
    # The json module's path (orjson refuses integers beyond 64 bits) writes the same JSON.
    huge = {**created, "data": {"n": 2**70}}
    assert json.loads(json_codec.dumps(huge))["metadata"] == wire(created)["metadata"]


def test_entries_a_client_sends_back_unchanged_are_the_stored_ones() -> None:
    created = track(None, configmap({"key": "a"}), "creator")
    edited = configmap({"key": "b"})
    without = track(created, edited, "editor", T1)
    sent_back = {**edited, "metadata": {**edited["metadata"], **wire(created)["metadata"]}}
    with_them = track(created, sent_back, "editor", T1)
    assert wire(with_them)["metadata"]["managedFields"] == wire(without)["metadata"]["managedFields"]
    # Entries a client changed are its own: they replace the stored ones.
    changed = copy.deepcopy(sent_back)
    changed["metadata"]["managedFields"][0]["manager"] = "importer"
    replaced = track(created, changed, "editor", T1)
    assert {e["manager"] for e in wire(replaced)["metadata"]["managedFields"]} == {"importer", "editor"}


def test_a_patch_can_edit_a_field_set_as_json() -> None:
    created = track(None, configmap({"key": "a"}), "creator")
    ops = [{"op": "add", "path": "/metadata/managedFields/0/fieldsV1/f:data/f:extra", "value": {}}]
    patched = apply(created, ops, JSON_PATCH, builtin=True)
    assert patched["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {".": {}, "f:key": {}, "f:extra": {}}}
    assert isinstance(created["metadata"]["managedFields"][0]["fieldsV1"], bytes), "the stored object is unchanged"
    # A `test` of the list compares the field sets a client read, not their stored text.
    read = wire(created)["metadata"]["managedFields"]
    tested = apply(
        created, [{"op": "test", "path": "/metadata/managedFields", "value": read}], JSON_PATCH, builtin=True
    )
    assert wire(tested) == wire(created)
    merged = apply(created, {"metadata": {"managedFields": [{"manager": "x"}]}}, MERGE_PATCH, builtin=True)
    assert merged["metadata"]["managedFields"] == [{"manager": "x"}]
    untouched = apply(created, {"data": {"key": "b"}}, MERGE_PATCH, builtin=True)
    assert wire(untouched)["metadata"] == wire(created)["metadata"]


def test_objects_read_back_from_the_database_keep_their_field_sets_as_text(tmp_path: Path) -> None:
    created = wire(track(None, configmap({"key": "a"}), "creator"))  # decoded, as older stores wrote it
    store = Store(tmp_path / "state.db", fsync=False)
    store.create("configmaps", "ns/cm", created)
    store.close()
    reopened = Store(tmp_path / "state.db", fsync=False)
    try:
        record = reopened.get("configmaps", "ns/cm")
        assert record is not None
        assert isinstance(record.value["metadata"]["managedFields"][0]["fieldsV1"], bytes)
        answered = wire(record.value)
        del answered["metadata"]["resourceVersion"]
        assert answered == created
    finally:
        reopened.close()
