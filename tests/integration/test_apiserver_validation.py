"""Writes the server refuses before anything is stored, over HTTPS against the real server process (issue 12, 1-6).

Each test sends what an attacker or a sloppy client sent; before validation, each of these was stored (or answered
500 after it was stored) and some of them stopped the server from starting again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.apiserver.body_decoding import MAX_DEPTH
from tests.integration.conftest import NOT_ROOT_CA, VM_API, configmap, pod_manifest, unique, vm_manifest
from tests.integration.test_apiserver_semantics import assert_status, cms, nothing_stored, pods, vms
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.http_client import APIClient

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
YAML = "application/yaml"


def with_metadata(name: str, /, **metadata: Any) -> dict[str, Any]:
    body = configmap(name)
    body["metadata"].update(metadata)
    return body


def billion_laughs(levels: int) -> bytes:
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: laughs}", 'a0: &a0 ["lol","lol","lol","lol"]']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ",".join(f"*a{level - 1}" for _ in range(10)) + "]")
    lines.append(f"data: {{k: v}}\nextra: *a{levels}")
    return "\n".join(lines).encode()


# ------------------------------------------------------------------------------------------------ item 1


async def test_owner_references_of_the_wrong_type_are_400_and_stored_nowhere(api: APIClient, namespace: str) -> None:
    async with nothing_stored(api, cms(namespace)):
        reply = await api.post(cms(namespace), with_metadata("owned", ownerReferences={"uid": "x"}))
        assert_status(reply, 400, "BadRequest")
        assert reply.body["message"] == (
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal object into Go '
            "struct field ObjectMeta.metadata.ownerReferences of type []v1.OwnerReference"
        )
    assert (await api.post(cms(namespace), configmap("target"))).status == 201
    before = (await api.get(f"{cms(namespace)}/target")).body
    reply = await api.patch(f"{cms(namespace)}/target", {"metadata": {"ownerReferences": ["x"]}})
    assert_status(reply, 400, "BadRequest")
    reply = await api.patch(
        f"{cms(namespace)}/target", [{"op": "add", "path": "/metadata/ownerReferences", "value": ["x"]}], JSON_PATCH
    )
    assert_status(reply, 400, "BadRequest")
    assert (await api.get(f"{cms(namespace)}/target")).body == before


async def test_owner_references_need_uid_and_one_controller(api: APIClient, namespace: str) -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1", "controller": True}
    async with nothing_stored(api, cms(namespace)):
        reply = await api.post(cms(namespace), with_metadata("a", ownerReferences=[{**ref, "uid": ""}]))
        assert_status(reply, 422, "Invalid")
        assert reply.body["message"] == (
            'ConfigMap "a" is invalid: metadata.ownerReferences.uid: Invalid value: "": must not be empty'
        )
        reply = await api.post(cms(namespace), with_metadata("b", ownerReferences=[ref, {**ref, "uid": "u2"}]))
        assert_status(reply, 422, "Invalid")
        assert "Only one reference can have Controller set to true" in reply.body["message"]


async def test_a_rejected_owner_reference_leaves_the_server_able_to_restart(
    fresh_apiserver: APIServerProcess,
) -> None:
    async with APIClient(fresh_apiserver) as api:
        assert (await api.post(cms("default"), with_metadata("x", ownerReferences={"a": 1}))).status == 400
        assert (await api.post(cms("default"), configmap("kept"))).status == 201
        assert (await api.patch(f"{cms('default')}/kept", {"metadata": {"ownerReferences": ["x"]}})).status == 400
    fresh_apiserver.stop()
    fresh_apiserver.start()
    async with APIClient(fresh_apiserver) as api:
        assert (await api.get(f"{cms('default')}/kept")).status == 200


# ------------------------------------------------------------------------------------------------ item 2


async def test_yaml_alias_expansion_is_bounded_by_the_request_limit(api: APIClient, namespace: str) -> None:
    body = billion_laughs(6)
    assert len(body) < 1000
    async with nothing_stored(api, cms(namespace)):
        reply = await api.request("POST", cms(namespace), raw=body, content_type=YAML)
        assert_status(reply, 413, "RequestEntityTooLarge")
        reply = await api.request(
            "PATCH",
            f"{cms(namespace)}/laughs",
            raw=body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": "t"},
        )
        assert_status(reply, 413, "RequestEntityTooLarge")


async def test_json_patch_copies_cannot_grow_past_the_request_limit(api: APIClient, namespace: str) -> None:
    assert (await api.post(cms(namespace), configmap("grow") | {"data": {"k": "v" * 100_000}})).status == 201
    before = (await api.get(f"{cms(namespace)}/grow")).body
    ops = [{"op": "add", "path": "/data/k0", "value": "v" * 100_000}]
    ops += [{"op": "copy", "from": "/data/k0", "path": f"/data/k{i}"} for i in range(1, 40)]
    reply = await api.patch(f"{cms(namespace)}/grow", ops, JSON_PATCH)
    assert reply.status in (413, 422), reply.body
    # Doubling the object forty times would need a terabyte: the copies are bounded as they are made.
    doubling = [{"op": "copy", "from": "/data", "path": "/metadata/annotations"}]
    doubling += [{"op": "copy", "from": "/metadata", "path": f"/metadata/annotations/m{i}"} for i in range(40)]
    reply = await api.patch(f"{cms(namespace)}/grow", doubling, JSON_PATCH)
    assert_status(reply, 422, "Invalid")
    assert "accumulated size increase of copy" in reply.body["message"]
    assert (await api.get(f"{cms(namespace)}/grow")).body == before


# ------------------------------------------------------------------------------------------------ item 3


async def test_labels_that_are_not_a_map_are_400_and_selectors_keep_working(api: APIClient, namespace: str) -> None:
    assert (await api.post(cms(namespace), configmap("labelled", app="web"))).status == 201
    async with nothing_stored(api, cms(namespace)):
        reply = await api.post(cms(namespace), with_metadata("listy", labels=["app"]))
        assert_status(reply, 400, "BadRequest")
        assert reply.body["message"].endswith(
            "json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type map[string]string"
        )
        reply = await api.patch(
            f"{VM_API}/namespaces/{namespace}/virtualmachines/none", {"metadata": {"labels": ["app"]}}
        )
        assert reply.status == 404
    for path in (cms(namespace), "/api/v1/configmaps"):
        reply = await api.get(path, labelSelector="app")
        assert reply.status == 200, reply.body
    assert await api.names(cms(namespace), labelSelector="app=web") == ["labelled"]


# ------------------------------------------------------------------------------------------------ item 4


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_400(api: APIClient, namespace: str, constant: str) -> None:
    async with nothing_stored(api, cms(namespace), vms(namespace)):
        raw = f'{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"n"}},"data":{{"a":{constant}}}}}'
        assert_status(await api.request("POST", cms(namespace), raw=raw.encode()), 400, "BadRequest")
        vm = json.dumps(vm_manifest("nan")).replace('"Halted"', constant)
        assert_status(await api.request("POST", vms(namespace), raw=vm.encode()), 400, "BadRequest")
        yaml_body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: n}\nbinaryData: .nan\n"
        assert_status(await api.request("POST", cms(namespace), raw=yaml_body, content_type=YAML), 400, "BadRequest")


# ------------------------------------------------------------------------------------------------ item 5


@pytest.mark.parametrize("name", ["Upper", "ünicode", "nul\x00byte", "new\nline", "with space", "co:lon", "x" * 300])
async def test_names_must_be_dns_subdomains(api: APIClient, namespace: str, name: str) -> None:
    async with nothing_stored(api, cms(namespace), vms(namespace)):
        reply = await api.post(cms(namespace), configmap(name))
        assert_status(reply, 422, "Invalid")
        assert reply.body["details"]["causes"][-1]["field"] == "metadata.name"
        # Custom resources' names are DNS subdomains too.
        assert_status(await api.post(vms(namespace), vm_manifest(name)), 422, "Invalid")
    if name == "Upper":
        assert (
            reply.body["message"]
            == f'ConfigMap "Upper" is invalid: metadata.name: Invalid value: "Upper": {SUBDOMAIN_MSG}'
        )


async def test_namespace_names_are_dns_labels(api: APIClient) -> None:
    for name in ("n" * 64, "with.dots"):
        reply = await api.post(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
        assert_status(reply, 422, "Invalid")
    assert (
        reply.body["message"]
        == 'Namespace "with.dots" is invalid: metadata.name: Invalid value: "with.dots": must not contain dots'
    )


async def test_labels_annotations_and_finalizers_follow_the_rules(api: APIClient, namespace: str) -> None:
    async with nothing_stored(api, cms(namespace), vms(namespace)):
        for metadata in (
            {"labels": {"bad key": "v"}},
            {"labels": {"k": "v" * 1024 * 1024}},
            {"labels": {"k": "-v"}},
            {"annotations": {"a": "x" * (300 * 1024)}},
            {"annotations": {"bad key": ""}},
            {"finalizers": ["bad finalizer"]},
            {"generateName": "Bad-", "name": ""},
        ):
            reply = await api.post(cms(namespace), with_metadata("m", **metadata))
            assert_status(reply, 422, "Invalid")
        reply = await api.post(vms(namespace), vm_manifest("m") | {"metadata": {"name": "m", "labels": {"k": "-v"}}})
        assert_status(reply, 422, "Invalid")
        reply = await api.post(cms(namespace), with_metadata("m", annotations={"a": "x" * (300 * 1024)}))
        assert reply.body["message"] == (
            'ConfigMap "m" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'
        )


async def test_metadata_of_the_wrong_type_is_400(api: APIClient, namespace: str) -> None:
    async with nothing_stored(api, cms(namespace)):
        for metadata, field, go_type in (
            ({"name": 5}, "name", "string"),
            ({"finalizers": "a"}, "finalizers", "[]string"),
            ({"generateName": 5, "name": ""}, "generateName", "string"),
        ):
            reply = await api.post(cms(namespace), with_metadata("m", **metadata))
            assert_status(reply, 400, "BadRequest")
            assert reply.body["message"].endswith(f"ObjectMeta.metadata.{field} of type {go_type}"), reply.body


async def test_an_update_naming_another_uid_is_422(api: APIClient, namespace: str) -> None:
    """BeforeUpdate keeps the stored uid only when none is sent: a kubelet's status patch sends it as a guard."""
    assert (await api.post(cms(namespace), configmap("guarded"))).status == 201
    stored = (await api.get(f"{cms(namespace)}/guarded")).body
    reply = await api.put(f"{cms(namespace)}/guarded", stored | {"metadata": stored["metadata"] | {"uid": "0-1"}})
    assert_status(reply, 422, "Invalid")
    assert (
        reply.body["message"]
        == 'ConfigMap "guarded" is invalid: metadata.uid: Invalid value: "0-1": field is immutable'
    )
    assert (await api.get(f"{cms(namespace)}/guarded")).body["metadata"]["resourceVersion"] == stored["metadata"][
        "resourceVersion"
    ]
    assert (await api.post(pods(namespace), pod_manifest("guarded"))).status == 201
    uid = (await api.get(f"{pods(namespace)}/guarded")).body["metadata"]["uid"]
    status = f"{pods(namespace)}/guarded/status"
    reply = await api.patch(status, {"metadata": {"uid": "0-1"}, "status": {"phase": "Running"}}, STRATEGIC)
    assert_status(reply, 422, "Invalid")
    assert (await api.get(f"{pods(namespace)}/guarded")).body["status"].get("phase") != "Running"
    reply = await api.patch(status, {"metadata": {"uid": uid}, "status": {"phase": "Running"}}, STRATEGIC)
    assert reply.status == 200, reply.body
    assert reply.body["status"]["phase"] == "Running"
    # Without a uid the stored one is kept.
    reply = await api.put(f"{cms(namespace)}/guarded", stored | {"metadata": {"name": "guarded"}, "data": {"k": "v"}})
    assert reply.status == 200, reply.body
    assert reply.body["metadata"]["uid"] == stored["metadata"]["uid"]


async def test_configmap_data_must_be_strings(api: APIClient, namespace: str) -> None:
    async with nothing_stored(api, cms(namespace)):
        reply = await api.post(cms(namespace), configmap("d") | {"data": {"a": 1, "b": {"c": "d"}}})
        assert_status(reply, 400, "BadRequest")
        assert reply.body["message"] == (
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: '
            "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        )


async def test_unknown_fields_on_builtin_kinds_are_dropped_or_rejected(api: APIClient, namespace: str) -> None:
    body = configmap("extra") | {"spec": {"replicas": 3}, "status": "x"}
    reply = await api.post(cms(namespace), body)
    assert reply.status == 201, reply.body
    assert "spec" not in reply.body and "status" not in reply.body
    assert sorted(reply.warnings) == ['299 - "unknown field \\"spec\\""', '299 - "unknown field \\"status\\""']
    assert "spec" not in (await api.get(f"{cms(namespace)}/extra")).body
    async with nothing_stored(api, cms(namespace)):
        reply = await api.post(cms(namespace), configmap("strict") | {"spec": {}}, fieldValidation="Strict")
        assert_status(reply, 400, "BadRequest")
        assert reply.body["message"].endswith('strict decoding error: unknown field "spec"')
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "colour": "red"}]},
        }
        reply = await api.post(pods(namespace), pod, fieldValidation="Strict")
        assert reply.body["message"].endswith('strict decoding error: unknown field "spec.containers[0].colour"')


async def test_every_write_path_validates(api: APIClient, namespace: str) -> None:
    path = f"{cms(namespace)}/paths"
    assert (await api.post(cms(namespace), configmap("paths"))).status == 201
    before = (await api.get(path)).body
    bad_labels = {"metadata": {"labels": {"k": "-v"}}}
    assert_status(await api.patch(path, bad_labels), 422, "Invalid")
    assert_status(await api.patch(path, bad_labels, STRATEGIC), 422, "Invalid")
    assert_status(
        await api.patch(path, [{"op": "add", "path": "/metadata/labels", "value": {"k": "-v"}}], JSON_PATCH),
        422,
        "Invalid",
    )
    applied = configmap("paths")
    applied["metadata"]["labels"] = {"k": "-v"}
    reply = await api.request(
        "PATCH",
        path,
        raw=json.dumps(applied).encode(),
        content_type="application/apply-patch+yaml",
        params={"fieldManager": "t"},
    )
    assert_status(reply, 422, "Invalid")
    updated = json.loads(json.dumps(before))
    updated["data"] = {"k": 1}
    assert_status(await api.put(path, updated), 400, "BadRequest")
    assert (await api.get(path)).body == before


# ------------------------------------------------------------------------------------------------ item 6


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000])
async def test_deep_nesting_is_400_on_every_body(api: APIClient, namespace: str, depth: int) -> None:
    assert (await api.post(cms(namespace), configmap("deep"))).status in (201, 409)
    nested = '{"a":' * depth + "1" + "}" * depth
    async with nothing_stored(api, cms(namespace)):
        raw = f'{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"d2"}},"x":{nested}}}'.encode()
        assert_status(await api.request("POST", cms(namespace), raw=raw), 400, "BadRequest")
        yaml_nested = ("[" * depth + "]" * depth).encode()
        assert_status(
            await api.request("POST", cms(namespace), raw=b"x: " + yaml_nested, content_type=YAML), 400, "BadRequest"
        )
        for content_type in ("application/merge-patch+json", STRATEGIC):
            reply = await api.request(
                "PATCH", f"{cms(namespace)}/deep", raw=f'{{"x":{nested}}}'.encode(), content_type=content_type
            )
            assert_status(reply, 400, "BadRequest")
        reply = await api.request(
            "PATCH",
            f"{cms(namespace)}/deep",
            raw=f'[{{"op":"add","path":"/x","value":{nested}}}]'.encode(),
            content_type=JSON_PATCH,
        )
        assert_status(reply, 400, "BadRequest")


async def test_a_negative_limit_lists_everything(api: APIClient, namespace: str) -> None:
    # kube's ListOptions take any int64, and its storage pages only for a limit above 0.
    for name in ("one", "two"):
        assert (await api.post(cms(namespace), configmap(name))).status == 201
    reply = await api.get(cms(namespace), limit="-1", fieldSelector=NOT_ROOT_CA)
    assert reply.status == 200 and len(reply.body["items"]) == 2
    assert "continue" not in reply.body["metadata"]
    assert_status(await api.get(cms(namespace), limit="-"), 400, "BadRequest")


async def test_badly_typed_delete_options_are_400(api: APIClient, namespace: str) -> None:
    assert (await api.post(cms(namespace), configmap("kept"))).status == 201
    async with nothing_stored(api, cms(namespace)):
        for options in ({"preconditions": "x"}, {"gracePeriodSeconds": "soon"}, {"propagationPolicy": 5}, [1]):
            reply = await api.delete(f"{cms(namespace)}/kept", options)
            assert reply.status in (400, 422), (options, reply.body)
        reply = await api.delete(cms(namespace), {"preconditions": ["x"]})
        assert_status(reply, 400, "BadRequest")


async def test_badly_typed_patch_bodies_are_4xx(api: APIClient, namespace: str) -> None:
    assert (await api.post(cms(namespace), configmap("p"))).status == 201
    assert (await api.post(vms(namespace), vm_manifest("p"))).status == 201
    async with nothing_stored(api, cms(namespace), vms(namespace)):
        for path in (f"{cms(namespace)}/p", f"{vms(namespace)}/p"):
            for body, content_type in (
                ({"metadata": 5}, "application/merge-patch+json"),
                ({"metadata": []}, "application/merge-patch+json"),
                ([{"op": "add", "path": 5, "value": 1}], JSON_PATCH),
                ([5], JSON_PATCH),
                ({"op": "add"}, JSON_PATCH),
                ([{"op": "copy", "from": 5, "path": "/x"}], JSON_PATCH),
                ("just a string", "application/merge-patch+json"),
            ):
                reply = await api.patch(path, body, content_type)
                assert reply.status in (400, 422), (path, body, reply.status, reply.body)
        reply = await api.patch(f"{cms(namespace)}/p", {"metadata": 5})
        assert reply.body["message"].endswith("into Go struct field ConfigMap.metadata of type v1.ObjectMeta")


async def test_names_of_generated_objects_are_checked_too(api: APIClient, namespace: str) -> None:
    reply = await api.post(
        cms(namespace), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}
    )
    assert reply.status == 201
    assert reply.body["metadata"]["name"].startswith("gen-")
    name = unique("ok")
    assert (await api.post(cms(namespace), configmap(name))).status == 201


async def test_badly_typed_binding_and_eviction_bodies_are_400(api: APIClient, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "b"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    assert (await api.post(pods(namespace), pod)).status == 201
    async with nothing_stored(api, pods(namespace)):
        reply = await api.post(f"{pods(namespace)}/b/binding", {"target": "node-1"})
        assert_status(reply, 400, "BadRequest")
        assert reply.body["message"].endswith("Go struct field Binding.target of type v1.ObjectReference")
        reply = await api.post(f"{pods(namespace)}/b/eviction", {"deleteOptions": {"preconditions": "x"}})
        assert_status(reply, 400, "BadRequest")


@pytest.mark.kubectl
def test_kubectl_shows_kube_apiservers_messages(apiserver: APIServerProcess, tmp_path: Path) -> None:
    """What kubectl prints for a refused object: kube-apiserver's words, through kubectl's own formatting."""
    created = kubectl(apiserver, tmp_path, "create", "configmap", "Bad", check=False)
    assert created.returncode != 0
    assert f'ConfigMap "Bad" is invalid: metadata.name: Invalid value: "Bad": {SUBDOMAIN_MSG}' in created.stderr
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("k")}, "spec": {"x": 1}}
    applied = kubectl(apiserver, tmp_path, "apply", "-f", "-", stdin=json.dumps(manifest), check=False)
    assert applied.returncode != 0
    assert 'strict decoding error: unknown field "spec"' in applied.stderr
    typed = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("k")}, "data": {"n": "1"}}
    typed_body = json.dumps(typed).replace('"1"', "1")
    refused = kubectl(apiserver, tmp_path, "create", "-f", "-", "--validate=false", stdin=typed_body, check=False)
    assert refused.returncode != 0
    assert "cannot unmarshal number into Go struct field ConfigMap.data of type string" in refused.stderr
