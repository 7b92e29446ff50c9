"""Discovery documents: what kubectl, client-go's aggregated discovery and the Python client read first."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api.kinds import ALL_KINDS, KindSpec
from pykubevirt.apiserver import discovery
from pykubevirt.apiserver.builtin import BUILTIN_RESOURCES
from pykubevirt.apiserver.resources import Registry, Resource

KUBECTL_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
)


def kind_resource(spec: KindSpec) -> Resource:
    """The Resource the server registers for one of our CRDs."""
    return Resource(
        group=spec.group,
        version=spec.version,
        kind=spec.kind,
        plural=spec.plural,
        singular=spec.singular,
        namespaced=spec.namespaced,
        schema=spec.schema,
        short_names=spec.short_names,
        categories=spec.categories,
        printer_columns=tuple(c.to_crd() for c in spec.printer_columns),
        subresources=frozenset({"status"}) if spec.status_subresource else frozenset(),
    )


def make_registry() -> Registry:
    registry = Registry()
    registry.extend(BUILTIN_RESOURCES)
    registry.extend(kind_resource(spec) for spec in ALL_KINDS)
    return registry


SUBRESOURCES_LIST: dict[str, Any] = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "subresources.kubevirt.io/v1",
    "resources": [
        {"name": "virtualmachines/start", "singularName": "", "namespaced": True, "kind": "", "verbs": ["update"]},
        {
            "name": "virtualmachineinstances/console",
            "singularName": "",
            "namespaced": True,
            "kind": "",
            "verbs": ["get"],
        },
    ],
}
EXTRA = {("subresources.kubevirt.io", "v1"): SUBRESOURCES_LIST}


@pytest.fixture
def registry() -> Registry:
    return make_registry()


def _by_name(resource_list: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in resource_list["resources"]}


def test_version_matches_kubectl_minor() -> None:
    info = discovery.version_info()
    assert (info["major"], info["minor"]) == ("1", "32")
    assert info["gitVersion"].startswith("v1.32.")
    assert info["platform"].startswith("linux/")
    for key in ("goVersion", "compiler", "buildDate", "gitCommit", "gitTreeState"):
        assert info[key]


def test_api_versions() -> None:
    body = discovery.api_versions("10.0.0.1:6443")
    assert body["kind"] == "APIVersions"
    assert body["versions"] == ["v1"]
    assert body["serverAddressByClientCIDRs"] == [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]


def test_group_list(registry: Registry) -> None:
    body = discovery.api_group_list(registry, EXTRA)
    assert body["kind"] == "APIGroupList"
    groups = {g["name"]: g for g in body["groups"]}
    assert "" not in groups  # the core group is served at /api
    assert groups["kubevirt.io"]["preferredVersion"] == {"groupVersion": "kubevirt.io/v1", "version": "v1"}
    assert groups["instancetype.kubevirt.io"]["versions"] == [
        {"groupVersion": "instancetype.kubevirt.io/v1beta1", "version": "v1beta1"}
    ]
    assert "subresources.kubevirt.io" in groups
    names = [g["name"] for g in body["groups"]]
    # Built-in groups first (as kube-apiserver orders them), then custom groups by name.
    assert names.index("apps") < names.index("cdi.kubevirt.io") < names.index("kubevirt.io")


def test_preferred_version_uses_kube_priority() -> None:
    registry = Registry()
    for version in ("v1alpha1", "v1beta2", "v1", "v2beta1"):
        registry.add(Resource("example.io", version, "Thing", "things", "thing", True))
    group = discovery.api_group_list(registry)["groups"][0]
    assert [v["version"] for v in group["versions"]] == ["v1", "v2beta1", "v1beta2", "v1alpha1"]
    assert group["preferredVersion"]["version"] == "v1"


def test_vm_resource_entry(registry: Registry) -> None:
    body = discovery.api_resource_list(registry, "kubevirt.io", "v1")
    assert body is not None
    assert body["kind"] == "APIResourceList"
    assert body["groupVersion"] == "kubevirt.io/v1"
    vm = _by_name(body)["virtualmachines"]
    assert vm["singularName"] == "virtualmachine"
    assert vm["namespaced"] is True
    assert vm["kind"] == "VirtualMachine"
    assert vm["shortNames"] == ["vm", "vms"]
    assert vm["categories"] == ["all"]
    assert set(vm["verbs"]) >= {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
    assert vm["storageVersionHash"] == discovery.storage_version_hash("kubevirt.io", "v1", "VirtualMachine")


def test_subresource_entries_carry_verbs_only(registry: Registry) -> None:
    body = discovery.api_resource_list(registry, "kubevirt.io", "v1")
    assert body is not None
    entries = _by_name(body)
    status = entries["virtualmachines/status"]
    assert status["verbs"] == ["get", "patch", "update"]
    assert status["kind"] == "VirtualMachine"
    # VMIs have no status subresource in KubeVirt.
    assert "virtualmachineinstances/status" not in entries
    for name, entry in entries.items():
        if "/" in name:
            assert "shortNames" not in entry, name
            assert "categories" not in entry, name
            assert "storageVersionHash" not in entry, name
            assert entry["singularName"] == ""


def test_core_subresources(registry: Registry) -> None:
    body = discovery.api_resource_list(registry, "", "v1")
    assert body is not None
    assert body["groupVersion"] == "v1"
    entries = _by_name(body)
    assert entries["pods"]["shortNames"] == ["po"]
    assert entries["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert entries["pods/binding"] == {
        "name": "pods/binding",
        "singularName": "",
        "namespaced": True,
        "kind": "Binding",
        "verbs": ["create"],
    }
    assert entries["pods/log"]["verbs"] == ["get"]
    eviction = entries["pods/eviction"]
    assert (eviction["group"], eviction["version"], eviction["kind"], eviction["verbs"]) == (
        "policy",
        "v1",
        "Eviction",
        ["create"],
    )
    assert entries["namespaces/finalize"]["verbs"] == ["update"]
    assert entries["namespaces"]["namespaced"] is False
    # Each subresource entry follows its resource.
    parent = ""
    for name in entries:
        if "/" in name:
            assert name.split("/")[0] == parent
        else:
            parent = name


def test_cluster_scoped_kind(registry: Registry) -> None:
    body = discovery.api_resource_list(registry, "instancetype.kubevirt.io", "v1beta1")
    assert body is not None
    entries = _by_name(body)
    assert entries["virtualmachineclusterinstancetypes"]["namespaced"] is False
    assert entries["virtualmachineinstancetypes"]["namespaced"] is True
    assert not any("/" in name for name in entries)


def test_unknown_group_version(registry: Registry) -> None:
    assert discovery.api_resource_list(registry, "nope.example.io", "v1") is None
    assert discovery.api_resource_list(registry, "kubevirt.io", "v2") is None


def test_extra_resource_list_is_served(registry: Registry) -> None:
    body = discovery.api_resource_list(registry, "subresources.kubevirt.io", "v1", EXTRA)
    assert body is not None
    assert body["groupVersion"] == "subresources.kubevirt.io/v1"
    assert "virtualmachines/start" in _by_name(body)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (KUBECTL_ACCEPT, True),
        ("application/json", False),
        (None, False),
        ("", False),
        ("*/*", False),
        ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", False),
        ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", True),
        ("application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList", True),
        ("application/json;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", True),
        ("application/json,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", False),
        ("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", False),
        ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json", False),
    ],
)
def test_wants_aggregated(accept: str | None, expected: bool) -> None:
    assert discovery.wants_aggregated(accept) is expected


def test_aggregated_content_type() -> None:
    assert discovery.AGGREGATED_CONTENT_TYPE == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def _aggregated_resources(body: dict[str, Any], group: str, version: str) -> dict[str, dict[str, Any]]:
    item = next(i for i in body["items"] if i["metadata"].get("name", "") == group)
    found = next(v for v in item["versions"] if v["version"] == version)
    assert found["freshness"] == "Current"
    return {r["resource"]: r for r in found["resources"]}


def test_aggregated_apis(registry: Registry) -> None:
    body = discovery.aggregated_discovery(registry, core=False, extra_resource_lists=EXTRA)
    assert (body["kind"], body["apiVersion"]) == ("APIGroupDiscoveryList", "apidiscovery.k8s.io/v2")
    assert all(item["metadata"].get("name") for item in body["items"])  # no core group under /apis
    resources = _aggregated_resources(body, "kubevirt.io", "v1")
    vm = resources["virtualmachines"]
    assert vm["responseKind"] == {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"}
    assert vm["scope"] == "Namespaced"
    assert vm["singularResource"] == "virtualmachine"
    assert vm["shortNames"] == ["vm", "vms"]
    assert vm["categories"] == ["all"]
    assert vm["subresources"] == [
        {
            "subresource": "status",
            "responseKind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"},
            "verbs": ["get", "patch", "update"],
        }
    ]
    assert "subresources" not in resources["virtualmachineinstances"]
    assert not any("/" in name for name in resources)
    cluster = _aggregated_resources(body, "instancetype.kubevirt.io", "v1beta1")
    assert cluster["virtualmachineclusterpreferences"]["scope"] == "Cluster"
    # An aggregated API's list of bare subresources gets parents, as kube-aggregator publishes them.
    extra = _aggregated_resources(body, "subresources.kubevirt.io", "v1")
    assert extra["virtualmachines"]["subresources"][0]["subresource"] == "start"
    assert extra["virtualmachines"]["subresources"][0]["responseKind"]["group"] == "subresources.kubevirt.io"


def test_aggregated_core(registry: Registry) -> None:
    body = discovery.aggregated_discovery(registry, core=True)
    assert len(body["items"]) == 1
    resources = _aggregated_resources(body, "", "v1")
    pods = resources["pods"]
    assert pods["responseKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    subs = {s["subresource"]: s for s in pods["subresources"]}
    assert subs["eviction"]["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert subs["binding"]["responseKind"] == {"group": "", "version": "v1", "kind": "Binding"}
    assert subs["status"]["verbs"] == ["get", "patch", "update"]
    assert resources["nodes"]["scope"] == "Cluster"


def test_aggregated_matches_legacy(registry: Registry) -> None:
    """Every legacy entry appears in the aggregated document, as client-go converts it back."""
    body = discovery.aggregated_discovery(registry, core=False)
    for item in body["items"]:
        group = item["metadata"]["name"]
        for version in item["versions"]:
            legacy = discovery.api_resource_list(registry, group, version["version"])
            assert legacy is not None
            converted = set()
            for resource in version["resources"]:
                converted.add(resource["resource"])
                converted.update(f"{resource['resource']}/{s['subresource']}" for s in resource.get("subresources", []))
            assert converted == {entry["name"] for entry in legacy["resources"]}


def test_discovery_follows_registry_changes(registry: Registry) -> None:
    registry.add(Resource("example.io", "v1", "Widget", "widgets", "widget", False, short_names=("wd",)))
    groups = {g["name"] for g in discovery.api_group_list(registry)["groups"]}
    assert "example.io" in groups
    registry.remove("example.io", "v1", "widgets")
    assert "example.io" not in {g["name"] for g in discovery.api_group_list(registry)["groups"]}
