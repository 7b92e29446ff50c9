"""Discovery documents: /version, /api, /apis, /api/v1, /apis/<g>/<v> and aggregated discovery (apidiscovery.k8s.io/v2).

Pure functions over a Registry; the server serialises what they return.
"""

from __future__ import annotations

import base64
import hashlib
import platform
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pykubevirt.apiserver.resources import Registry, Resource

# kubectl warns when the server's minor version is more than one away from its own (1.32 here).
KUBE_MAJOR = "1"
KUBE_MINOR = "32"
# Build metadata (`+…`) rather than a pre-release suffix, so semver comparisons treat us as a full 1.32.0.
GIT_VERSION = f"v{KUBE_MAJOR}.{KUBE_MINOR}.0+pykubevirt"
GO_VERSION = "go1.23.8"
BUILD_DATE = "2025-04-22T16:03:58Z"

AGGREGATED_GROUP = "apidiscovery.k8s.io"
AGGREGATED_VERSION = "v2"
AGGREGATED_KIND = "APIGroupDiscoveryList"
AGGREGATED_CONTENT_TYPE = f"application/json;g={AGGREGATED_GROUP};v={AGGREGATED_VERSION};as={AGGREGATED_KIND}"

_AGGREGATED_PARAMS = (AGGREGATED_GROUP, AGGREGATED_VERSION, AGGREGATED_KIND)

DEFAULT_SERVER_ADDRESS = "127.0.0.1:6443"

# Verbs and response kind (group, version, kind; None = the parent's) of the subresources we serve.
SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "patch", "update"),
    "scale": ("get", "patch", "update"),
    "binding": ("create",),
    "log": ("get",),
    "exec": ("create", "get"),
    "portforward": ("create", "get"),
    "eviction": ("create",),
    "finalize": ("update",),
    "token": ("create",),
}
SUBRESOURCE_KINDS: dict[str, tuple[str, str, str]] = {
    "binding": ("", "v1", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "exec": ("", "v1", "PodExecOptions"),
    "portforward": ("", "v1", "PodPortForwardOptions"),
    "scale": ("autoscaling", "v1", "Scale"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
}
DEFAULT_SUBRESOURCE_VERBS = ("get",)

ExtraResourceLists = Mapping[tuple[str, str], Mapping[str, Any]]

_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def _go_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine or "amd64")


def version_info() -> dict[str, Any]:
    """The body of GET /version (k8s.io/apimachinery version.Info)."""
    return {
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": BUILD_DATE,
        "goVersion": GO_VERSION,
        "compiler": "gc",
        "platform": f"linux/{_go_arch()}",
    }


def version_sort_key(version: str) -> tuple[int, int, int, int, str]:
    """Kubernetes' version priority: GA before beta before alpha, higher numbers first, odd names last by name."""
    match = _KUBE_VERSION.match(version)
    if match is None:
        return (1, 0, 0, 0, version)
    major, stage, minor = match.groups()
    stage_rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (0, stage_rank, -int(major), -int(minor or 0), "")


def _group_versions(registry: Registry, extra: ExtraResourceLists | None) -> dict[str, list[str]]:
    """group → versions, preferred first: built-in groups in registry order, then the other groups by name."""
    found: dict[str, list[str]] = {}
    builtin_groups: list[str] = []
    pairs = [(r.group, r.version, r.builtin) for r in registry.all()]
    pairs += [(group, version, False) for group, version in extra or {}]
    for group, version, builtin in pairs:
        versions = found.setdefault(group, [])
        if version not in versions:
            versions.append(version)
        if builtin and group not in builtin_groups:
            builtin_groups.append(group)
    order = builtin_groups + sorted(g for g in found if g not in builtin_groups)
    return {group: sorted(found[group], key=version_sort_key) for group in order}


def api_versions(server_address: str = DEFAULT_SERVER_ADDRESS) -> dict[str, Any]:
    """The body of GET /api (APIVersions)."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_version(group: str, version: str) -> dict[str, str]:
    return {"groupVersion": f"{group}/{version}" if group else version, "version": version}


def api_group_list(registry: Registry, extra_resource_lists: ExtraResourceLists | None = None) -> dict[str, Any]:
    """The body of GET /apis (APIGroupList); the core group is served by /api instead."""
    groups = []
    for group, versions in _group_versions(registry, extra_resource_lists).items():
        if not group:
            continue
        groups.append(
            {
                "name": group,
                "versions": [_group_version(group, v) for v in versions],
                "preferredVersion": _group_version(group, versions[0]),
            }
        )
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """kube-apiserver's storageVersionHash: base64 of the first 8 bytes of sha256("group/version/kind")."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _resource_entry(resource: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": list(resource.verbs),
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    if resource.categories:
        entry["categories"] = list(resource.categories)
    # A CRD's versions all hash its storage version, as kube-apiserver does.
    stored_as = resource.storage_version or resource.version
    entry["storageVersionHash"] = storage_version_hash(resource.group, stored_as, resource.kind)
    return entry


def _subresource_entry(resource: Resource, subresource: str) -> dict[str, Any]:
    # No shortNames/categories here: kubectl would report the short name as ambiguous with the subresource.
    entry: dict[str, Any] = {
        "name": f"{resource.plural}/{subresource}",
        "singularName": "",
        "namespaced": resource.namespaced,
    }
    group, version, kind = SUBRESOURCE_KINDS.get(subresource, (resource.group, resource.version, resource.kind))
    if (group, version) != (resource.group, resource.version):
        entry["group"] = group
        entry["version"] = version
    entry["kind"] = kind
    entry["verbs"] = list(SUBRESOURCE_VERBS.get(subresource, DEFAULT_SUBRESOURCE_VERBS))
    return entry


def _resource_entries(resources: Iterable[Resource]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for resource in sorted(resources, key=lambda r: r.plural):
        entries.append(_resource_entry(resource))
        entries.extend(_subresource_entry(resource, sub) for sub in sorted(resource.subresources))
    return entries


def api_resource_list(
    registry: Registry, group: str, version: str, extra_resource_lists: ExtraResourceLists | None = None
) -> dict[str, Any] | None:
    """The body of GET /api/v1 or /apis/<group>/<version> (APIResourceList); None when nothing is served there."""
    resources = registry.in_group_version(group, version)
    extra = (extra_resource_lists or {}).get((group, version))
    if not resources and extra is None:
        return None
    entries = _resource_entries(resources)
    if extra is not None:
        known = {entry["name"] for entry in entries}
        entries.extend(dict(e) for e in extra.get("resources", []) if e.get("name") not in known)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def wants_aggregated(accept_header: str | None) -> bool:
    """Whether the Accept header's most preferred type we can serve is aggregated discovery v2."""
    if not accept_header:
        return False
    ranges: list[tuple[float, int, str, dict[str, str]]] = []
    for index, part in enumerate(accept_header.split(",")):
        fields = [f.strip() for f in part.split(";")]
        params: dict[str, str] = {}
        for field in fields[1:]:
            key, sep, value = field.partition("=")
            if sep:
                params[key.strip().lower()] = value.strip().strip('"')
        try:
            quality = float(params.pop("q", "1"))
        except ValueError:
            quality = 0.0
        if quality > 0:
            ranges.append((-quality, index, fields[0].lower(), params))
    for _, _, mime, params in sorted(ranges, key=lambda r: (r[0], r[1])):
        if mime not in ("application/json", "application/*", "*/*"):
            continue  # protobuf and friends: we only speak JSON
        if not params:
            return False
        if (params.get("g"), params.get("v"), params.get("as")) == _AGGREGATED_PARAMS:
            return True
        # Another variant (v2beta1, a Table…): not ours, try the next preference.
    return False


def _response_kind(entry: Mapping[str, Any], group: str, version: str) -> dict[str, str]:
    kind = str(entry.get("kind", ""))
    if "group" in entry or "version" in entry:  # set only when the kind lives in another group-version
        return {"group": str(entry.get("group", "")), "version": str(entry.get("version") or version), "kind": kind}
    return {"group": group, "version": version, "kind": kind}


def resources_to_discovery_v2(group: str, version: str, entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """APIResourceList entries → APIResourceDiscovery items, as kube-aggregator converts them."""
    entries = list(entries)
    result: list[dict[str, Any]] = []
    parents: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name = str(entry["name"])
        if "/" in name:
            continue
        item: dict[str, Any] = {
            "resource": name,
            "responseKind": _response_kind(entry, group, version),
            "scope": "Namespaced" if entry.get("namespaced") else "Cluster",
            "singularResource": entry.get("singularName", ""),
            "verbs": list(entry.get("verbs", [])),
        }
        for key in ("shortNames", "categories"):
            if entry.get(key):
                item[key] = list(entry[key])
        result.append(item)
        parents[name] = item
    for entry in entries:
        parent_name, sep, sub = str(entry["name"]).partition("/")
        if not sep:
            continue
        parent = parents.get(parent_name)
        if parent is None:
            # A subresource without its resource (an aggregated API's list): kube publishes a bare parent.
            parent = {
                "resource": parent_name,
                "responseKind": {"group": "", "version": "", "kind": ""},
                "scope": "Namespaced" if entry.get("namespaced") else "Cluster",
                "verbs": [],
            }
            result.append(parent)
            parents[parent_name] = parent
        parent.setdefault("subresources", []).append(
            {
                "subresource": sub,
                "responseKind": _response_kind(entry, group, version),
                "verbs": list(entry.get("verbs", [])),
            }
        )
    return result


def aggregated_discovery(
    registry: Registry, core: bool, extra_resource_lists: ExtraResourceLists | None = None
) -> dict[str, Any]:
    """The APIGroupDiscoveryList (apidiscovery.k8s.io/v2) for /api (core=True) or /apis (core=False)."""
    items: list[dict[str, Any]] = []
    for group, versions in _group_versions(registry, extra_resource_lists).items():
        if bool(group) == core:
            continue
        version_items = []
        for version in versions:
            listing = api_resource_list(registry, group, version, extra_resource_lists) or {"resources": []}
            version_items.append(
                {
                    "version": version,
                    "resources": resources_to_discovery_v2(group, version, listing["resources"]),
                    "freshness": "Current",
                }
            )
        items.append({"metadata": {"name": group} if group else {}, "versions": version_items})
    return {
        "kind": AGGREGATED_KIND,
        "apiVersion": f"{AGGREGATED_GROUP}/{AGGREGATED_VERSION}",
        "metadata": {},
        "items": items,
    }
