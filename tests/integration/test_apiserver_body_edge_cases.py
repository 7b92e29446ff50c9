"""Bodies kube-apiserver reads in its own way: DeleteOptions' dryRun, lone UTF-16 surrogates and null values in
string maps. Each once broke the embedded server (a real delete, a 500, a stored null)."""

from __future__ import annotations

import uuid

from tests.integration.conftest import custom_resource_definition
from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient

CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"


def _name() -> str:
    return f"e-{uuid.uuid4().hex[:8]}"


def config_map(name: str, **labels: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"a": "b"}}


async def test_a_dry_run_named_in_delete_options_deletes_nothing(apiserver: APIServerProcess) -> None:
    group = _name()
    names = [_name(), _name()]
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]}
    async with APIClient(apiserver) as http:
        for name in names:
            assert (await http.post(CONFIG_MAPS, config_map(name, group=group))).status == 201
        one = await http.delete(f"{CONFIG_MAPS}/{names[0]}", options)
        assert one.status == 200 and one.body["metadata"]["name"] == names[0]
        every = await http.request("DELETE", CONFIG_MAPS, options, params={"labelSelector": f"group={group}"})
        assert every.status == 200 and len(every.body["items"]) == 2
        assert await http.names(CONFIG_MAPS, labelSelector=f"group={group}") == sorted(names)
        wrong = await http.delete(f"{CONFIG_MAPS}/{names[0]}", {**options, "dryRun": ["All", "Some"]})
        assert wrong.status == 400 and wrong.message == 'Invalid dryRun value: "Some": supported values: "All"'
        assert (await http.delete(f"{CONFIG_MAPS}/{names[0]}")).status == 200
        assert await http.names(CONFIG_MAPS, labelSelector=f"group={group}") == [names[1]]


async def test_a_lone_surrogate_is_read_as_the_replacement_character(apiserver: APIServerProcess) -> None:
    name = _name()
    body = config_map(name)
    body["metadata"]["annotations"] = {"note": "a\ud800b"}  # type: ignore[index]
    async with APIClient(apiserver) as http:
        created = await http.post(CONFIG_MAPS, body)
        assert created.status == 201, created.body
        assert created.body["metadata"]["annotations"] == {"note": "a\ufffdb"}
        # In a key as well: then an annotation key kube refuses, with its message and not a 500.
        keyed = await http.patch(f"{CONFIG_MAPS}/{name}", {"metadata": {"annotations": {"\udc00": "x"}}})
        assert keyed.status == 422 and keyed.message.startswith(
            f'ConfigMap "{name}" is invalid: metadata.annotations: Invalid value: "\ufffd": name part must consist of'
        ), keyed.body
        patched = await http.patch(f"{CONFIG_MAPS}/{name}", {"data": {"a": "\udfff"}})
        assert patched.status == 200 and patched.body["data"] == {"a": "\ufffd"}
        # A UTF-16 body is not JSON to kube's decoder.
        raw = '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"u16"}}'.encode("utf-16")
        assert (await http.request("POST", CONFIG_MAPS, raw=raw)).status == 400


async def test_a_null_in_a_string_map_is_stored_as_an_empty_string(apiserver: APIServerProcess) -> None:
    name = _name()
    body = config_map(name)
    body["metadata"]["labels"] = {"a": None, "b": "c"}  # type: ignore[index]
    body["data"] = {"k": None}
    async with APIClient(apiserver) as http:
        created = await http.post(CONFIG_MAPS, body)
        assert created.status == 201, created.body
        assert created.body["metadata"]["labels"] == {"a": "", "b": "c"}
        assert created.body["data"] == {"k": ""}
        # A custom resource's ObjectMeta too.
        group = f"{_name()}.example.com"
        crd = custom_resource_definition(group, "Gadget", {"type": "object"})
        assert (await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)).status == 201
        gadget = {
            "apiVersion": f"{group}/v1",
            "kind": "Gadget",
            "metadata": {"name": name, "labels": {"a": None}, "annotations": {"n": None}},
        }
        custom = await http.post(f"/apis/{group}/v1/namespaces/default/gadgets", gadget)
        assert custom.status == 201, custom.body
        assert custom.body["metadata"]["labels"] == {"a": ""} and custom.body["metadata"]["annotations"] == {"n": ""}
        assert (
            await http.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.{group}")
        ).status == 200


async def test_a_patch_or_replacement_cannot_rename_or_move_an_object(apiserver: APIServerProcess) -> None:
    name = _name()
    path = f"{CONFIG_MAPS}/{name}"
    async with APIClient(apiserver) as http:
        assert (await http.post(CONFIG_MAPS, config_map(name, keep="yes"))).status == 201
        renamed = await http.patch(path, {"metadata": {"name": "other"}})
        assert renamed.status == 400
        assert renamed.message == f"the name of the object (other) does not match the name on the URL ({name})"
        moved = await http.patch(
            path,
            [{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}],
            content_type="application/json-patch+json",
        )
        assert moved.status == 400
        assert (
            moved.message
            == "the namespace of the object (kube-system) does not match the namespace on the URL (default)"
        )
        wiped = await http.patch(path, {"metadata": None})
        assert wiped.status == 400 and wiped.message.startswith("the name of the object () does not match")
        current = (await http.get(path)).body
        replaced = await http.put(path, {**current, "metadata": {**current["metadata"], "namespace": "kube-system"}})
        assert replaced.status == 400
        assert (
            replaced.message == "the namespace of the provided object does not match the namespace sent on the request"
        )
        # Nothing of it was written.
        assert (await http.get(path)).body["metadata"]["labels"] == {"keep": "yes"}
