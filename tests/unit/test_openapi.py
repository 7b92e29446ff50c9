"""OpenAPI documents: what kubectl needs for `explain` and to send fieldValidation=Strict."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pykubevirt.apiserver import openapi, openapi_schemas
from pykubevirt.apiserver.resources import Registry, Resource
from tests.unit.test_discovery import make_registry

VM_ITEM = "/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"
VM_SCHEMA = "io.kubevirt.v1.VirtualMachine"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@pytest.fixture
def registry() -> Registry:
    return make_registry()


def _params(operation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in operation.get("parameters", [])}


def _resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref") or node.get("allOf", [{}])[0].get("$ref")
    if ref:
        return dict(document["components"]["schemas"][ref.removeprefix("#/components/schemas/")])
    return node


def _all_refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            found.add(node["$ref"])
        for value in node.values():
            found |= _all_refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _all_refs(value)
    return found


def test_index_lists_group_versions(registry: Registry) -> None:
    index = openapi.openapi_v3_index(registry)
    paths = index["paths"]
    for key in (
        "api/v1",
        "apis/kubevirt.io/v1",
        "apis/instancetype.kubevirt.io/v1beta1",
        "apis/cdi.kubevirt.io/v1beta1",
    ):
        assert key in paths
    cache = openapi.OpenAPICache(registry)
    digest = cache.hash("kubevirt.io", "v1")
    assert digest is not None and len(digest) == 128 and digest == digest.upper()
    assert paths["apis/kubevirt.io/v1"]["serverRelativeURL"] == f"/openapi/v3/apis/kubevirt.io/v1?hash={digest}"
    assert cache.index() == index


def test_document_keys() -> None:
    assert openapi.document_key("", "v1") == "api/v1"
    assert openapi.document_key("kubevirt.io", "v1") == "apis/kubevirt.io/v1"
    assert openapi.parse_document_key("api/v1") == ("", "v1")
    assert openapi.parse_document_key("/apis/kubevirt.io/v1") == ("kubevirt.io", "v1")
    assert openapi.parse_document_key("apis/kubevirt.io") is None


def test_vm_patch_operation(registry: Registry) -> None:
    document = openapi.openapi_v3_document(registry, "kubevirt.io", "v1")
    assert document is not None
    assert document["openapi"] == "3.0.0"
    assert document["info"]["title"]
    patch = document["paths"][VM_ITEM]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "kubevirt.io",
        "version": "v1",
        "kind": "VirtualMachine",
    }
    assert patch["x-kubernetes-action"] == "patch"
    params = _params(patch)
    assert params["fieldValidation"]["in"] == "query"
    assert {"dryRun", "fieldManager", "force"} <= set(params)
    content = patch["requestBody"]["content"]
    assert {"application/merge-patch+json", "application/json-patch+json", "application/apply-patch+yaml"} <= set(
        content
    )
    assert "application/strategic-merge-patch+json" not in content
    path_params = _params(document["paths"][VM_ITEM])
    assert path_params["name"]["in"] == "path" and path_params["namespace"]["in"] == "path"


def test_vm_operations(registry: Registry) -> None:
    document = openapi.openapi_v3_document(registry, "kubevirt.io", "v1")
    assert document is not None
    paths = document["paths"]
    item = paths[VM_ITEM]
    assert {item[m]["x-kubernetes-action"] for m in ("get", "put", "patch", "delete")} == {
        "get",
        "put",
        "patch",
        "delete",
    }
    assert "fieldValidation" in _params(item["put"]) and "dryRun" in _params(item["put"])
    assert "dryRun" in _params(item["delete"]) and "propagationPolicy" in _params(item["delete"])
    collection = paths["/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines"]
    assert collection["get"]["x-kubernetes-action"] == "list"
    assert collection["post"]["x-kubernetes-action"] == "post"
    assert collection["delete"]["x-kubernetes-action"] == "deletecollection"
    assert "fieldValidation" in _params(collection["post"])
    assert "labelSelector" in _params(collection["get"])
    # kubectl get -A uses the cluster-wide path.
    assert paths["/apis/kubevirt.io/v1/virtualmachines"]["get"]["x-kubernetes-action"] == "list"
    status = paths[VM_ITEM + "/status"]
    assert set(status) >= {"get", "put", "patch"}
    assert status["patch"]["x-kubernetes-group-version-kind"]["kind"] == "VirtualMachine"
    assert "fieldValidation" in _params(status["patch"])
    # VMIs have no status subresource, so no status path either.
    assert "/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}/status" not in paths
    operation_ids = [op["operationId"] for path in paths.values() for k, op in path.items() if k != "parameters"]
    assert len(operation_ids) == len(set(operation_ids))
    assert "patchKubevirtIoV1NamespacedVirtualMachine" in operation_ids


def test_cluster_scoped_paths(registry: Registry) -> None:
    document = openapi.openapi_v3_document(registry, "instancetype.kubevirt.io", "v1beta1")
    assert document is not None
    paths = document["paths"]
    item = "/apis/instancetype.kubevirt.io/v1beta1/virtualmachineclusterinstancetypes/{name}"
    assert "patch" in paths[item]
    assert [p["name"] for p in paths[item]["parameters"]] == ["name", "pretty"]
    assert "io.kubevirt.instancetype.v1beta1.VirtualMachineClusterInstancetype" in document["components"]["schemas"]


def test_vm_schema(registry: Registry) -> None:
    document = openapi.openapi_v3_document(registry, "kubevirt.io", "v1")
    assert document is not None
    schemas = document["components"]["schemas"]
    vm = schemas[VM_SCHEMA]
    assert vm["x-kubernetes-group-version-kind"] == [
        {"group": "kubevirt.io", "kind": "VirtualMachine", "version": "v1"}
    ]
    assert vm["properties"]["metadata"]["allOf"] == [{"$ref": f"#/components/schemas/{OBJECT_META}"}]
    assert vm["properties"]["apiVersion"]["type"] == "string"
    assert vm["properties"]["kind"]["description"]
    run_strategy = vm["properties"]["spec"]["properties"]["runStrategy"]
    assert run_strategy["type"] == "string" and "Always" in run_strategy["description"]
    vm_list = schemas["io.kubevirt.v1.VirtualMachineList"]
    assert vm_list["x-kubernetes-group-version-kind"] == [
        {"group": "kubevirt.io", "kind": "VirtualMachineList", "version": "v1"}
    ]
    assert vm_list["properties"]["items"]["items"] == {"$ref": f"#/components/schemas/{VM_SCHEMA}"}
    meta = schemas[OBJECT_META]
    assert {"name", "namespace", "labels", "annotations", "ownerReferences", "finalizers", "uid"} <= set(
        meta["properties"]
    )
    assert all(field.get("description") for field in meta["properties"].values())
    for name in ("Status", "DeleteOptions", "Patch", "ListMeta"):
        assert f"io.k8s.apimachinery.pkg.apis.meta.v1.{name}" in schemas


def test_published_schema_does_not_alter_the_model(registry: Registry) -> None:
    resource = registry.get("kubevirt.io", "v1", "virtualmachines")
    assert resource is not None and resource.schema is not None
    before = json.dumps(resource.schema, sort_keys=True)
    openapi.openapi_v3_document(registry, "kubevirt.io", "v1")
    assert json.dumps(resource.schema, sort_keys=True) == before


def test_every_reference_resolves(registry: Registry) -> None:
    for group, versions in registry.groups().items():
        for version in versions:
            document = openapi.openapi_v3_document(registry, group, version)
            assert document is not None
            names = set(document["components"]["schemas"])
            for ref in _all_refs(document):
                assert ref.removeprefix("#/components/schemas/") in names, ref
            json.dumps(document)  # plain JSON


def test_core_document(registry: Registry) -> None:
    document = openapi.openapi_v3_document(registry, "", "v1")
    assert document is not None
    schemas = document["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    patch = document["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "fieldValidation" in _params(patch)
    eviction = document["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"]
    assert eviction["x-kubernetes-group-version-kind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert "io.k8s.api.policy.v1.Eviction" in schemas
    assert "/api/v1/namespaces/{name}/finalize" in document["paths"]
    assert "/api/v1/nodes/{name}" in document["paths"]


def test_schema_names() -> None:
    assert openapi_schemas.schema_name("", "v1", "Pod", True) == "io.k8s.api.core.v1.Pod"
    assert (
        openapi_schemas.schema_name("apps", "v1", "ControllerRevision", True) == "io.k8s.api.apps.v1.ControllerRevision"
    )
    assert openapi_schemas.schema_name("coordination.k8s.io", "v1", "Lease", True) == "io.k8s.api.coordination.v1.Lease"
    crd = openapi_schemas.schema_name("apiextensions.k8s.io", "v1", "CustomResourceDefinition", True)
    assert crd == "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
    assert (
        openapi_schemas.schema_name("cdi.kubevirt.io", "v1beta1", "DataVolume", False)
        == "io.kubevirt.cdi.v1beta1.DataVolume"
    )


def test_unknown_group_version(registry: Registry) -> None:
    assert openapi.openapi_v3_document(registry, "nope.io", "v1") is None
    assert openapi.OpenAPICache(registry).document("nope.io", "v1") is None


def test_cache_follows_registry_generation(registry: Registry) -> None:
    cache = openapi.OpenAPICache(registry)
    first = cache.document("kubevirt.io", "v1")
    assert cache.document("kubevirt.io", "v1") is first  # cached
    old_hash = cache.hash("kubevirt.io", "v1")
    body = cache.document_bytes("kubevirt.io", "v1")
    assert body is not None and json.loads(body) == first
    registry.add(Resource("kubevirt.io", "v1", "Widget", "widgets", "widget", True, {"type": "object"}))
    assert cache.hash("kubevirt.io", "v1") != old_hash
    document = cache.document("kubevirt.io", "v1")
    assert document is not None and "io.kubevirt.v1.Widget" in document["components"]["schemas"]
    assert "apis/example.io/v1" not in cache.index()["paths"]
    registry.add(Resource("example.io", "v1", "Thing", "things", "thing", False))
    assert "apis/example.io/v1" in cache.index()["paths"]
    assert json.loads(cache.index_bytes()) == cache.index()


def test_openapi_v2(registry: Registry) -> None:
    cache = openapi.OpenAPICache(registry)
    document = json.loads(cache.v2_bytes())
    assert document["swagger"] == "2.0"
    vm = document["definitions"][VM_SCHEMA]
    assert vm["x-kubernetes-group-version-kind"] == [
        {"group": "kubevirt.io", "kind": "VirtualMachine", "version": "v1"}
    ]
    patch = document["paths"]["/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "VirtualMachine"
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    for ref in _all_refs(document):
        assert ref.removeprefix("#/definitions/") in document["definitions"], ref


# --- kubectl against a minimal TLS server built from these modules -------------------------------------------------


def test_openapi_v2_lists_every_operation_and_kubes_built_in_schemas(registry: Registry) -> None:
    document = json.loads(openapi.OpenAPICache(registry).v2_bytes())
    pods = document["paths"]["/api/v1/namespaces/{namespace}/pods"]
    assert {"get", "post", "delete"} <= set(pods)
    assert pods["get"]["x-kubernetes-action"] == "list"
    pod = document["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]
    assert {"get", "put", "patch", "delete"} <= set(pod)
    assert pod["put"]["parameters"][0]["in"] == "body"
    assert pod["put"]["parameters"][0]["schema"] == {"$ref": "#/definitions/io.k8s.api.core.v1.Pod"}
    assert pod["get"]["responses"]["200"]["schema"] == {"$ref": "#/definitions/io.k8s.api.core.v1.Pod"}
    # kubectl apply picks its patch type from PATCH's consumes: strategic merge stays out (see openapi.py).
    assert "application/strategic-merge-patch+json" not in pod["patch"]["consumes"]
    assert "/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/status" in document["paths"]
    container = document["definitions"]["io.k8s.api.core.v1.Container"]
    assert container["properties"]["image"]["type"] == "string"
    assert container["required"] == ["name"]
    for ref in _all_refs(document):
        assert ref.removeprefix("#/definitions/") in document["definitions"], ref


def test_built_in_kinds_publish_kubes_schemas_in_v3(registry: Registry) -> None:
    schemas = openapi.OpenAPICache(registry).document("", "v1")["components"]["schemas"]  # type: ignore[index]
    pod_spec = schemas["io.k8s.api.core.v1.Pod"]["properties"]["spec"]
    assert pod_spec["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["items"]["$ref"] == "#/components/schemas/io.k8s.api.core.v1.Container"
    port = schemas["io.k8s.api.core.v1.ContainerPort"]["properties"]["containerPort"]
    assert port["type"] == "integer"
    assert schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"] == "int-or-string"
    for ref in _all_refs(schemas):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
