"""OpenAPI documents generated from the registry: /openapi/v3 (index + one document a group-version) and /openapi/v2.

kubectl reads them for `explain` and to learn that the server honours `fieldValidation` (then it skips client-side
validation and sends fieldValidation=Strict).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

from pykubevirt.apiserver import builtin_openapi
from pykubevirt.apiserver import openapi_v2 as openapi_v2_conversion
from pykubevirt.apiserver.discovery import GIT_VERSION
from pykubevirt.apiserver.openapi_schemas import (
    DELETE_OPTIONS,
    PATCH,
    STATUS,
    V3_REF_PREFIX,
    Schema,
    gvk,
    kind_schema,
    list_kind,
    list_schema,
    meta_schemas,
    open_kind_schema,
    ref,
    resource_schema_name,
    schema_name,
)
from pykubevirt.apiserver.resources import Registry, Resource

PATCH_CONTENT_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")
# Strategic merge patch is left out on purpose: kubectl would then compute patches for built-in kinds from our open
# schemas (and warn); without it kubectl falls back to its compiled-in Go types, which know the patch strategies.

# Subresource → [(HTTP method, x-kubernetes-action)], the GVK it answers with (None: the parent's), response type.
_SUBRESOURCE_OPS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, str, str] | None]] = {
    "status": ((("get", "get"), ("put", "put"), ("patch", "patch")), None),
    "scale": ((("get", "get"), ("put", "put"), ("patch", "patch")), ("autoscaling", "v1", "Scale")),
    "binding": ((("post", "post"),), ("", "v1", "Binding")),
    "eviction": ((("post", "post"),), ("policy", "v1", "Eviction")),
    "finalize": ((("put", "put"),), None),
    "log": ((("get", "get"),), None),
    "exec": ((("get", "connect"), ("post", "connect")), ("", "v1", "PodExecOptions")),
    "portforward": ((("get", "connect"), ("post", "connect")), ("", "v1", "PodPortForwardOptions")),
}
_SUBRESOURCE_VERB = {"get": "read", "put": "replace", "patch": "patch", "post": "create"}


def document_key(group: str, version: str) -> str:
    """The index key of a group-version: `api/v1` or `apis/<group>/<version>`."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def parse_document_key(key: str) -> tuple[str, str] | None:
    """`api/v1` → ("", "v1"); `apis/kubevirt.io/v1` → ("kubevirt.io", "v1"); None for anything else."""
    parts = key.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "api":
        return "", parts[1]
    if len(parts) == 3 and parts[0] == "apis":
        return parts[1], parts[2]
    return None


def _query(name: str, description: str, kind: str = "string") -> Schema:
    return {"name": name, "in": "query", "description": description, "schema": {"type": kind, "uniqueItems": True}}


def _path_param(name: str, description: str) -> Schema:
    return {"name": name, "in": "path", "description": description, "required": True, "schema": {"type": "string"}}


PRETTY = _query("pretty", "If 'true', then the output is pretty printed.")
DRY_RUN = _query("dryRun", "When present, indicates that modifications should not be persisted. Valid: All.")
FIELD_MANAGER = _query("fieldManager", "A name associated with the actor or entity that is making these changes.")
FIELD_VALIDATION = _query(
    "fieldValidation",
    "How the server handles objects with unknown or duplicate fields: Ignore, Warn or Strict (reject the request).",
)
FORCE = _query("force", 'Force is going to "force" Apply requests (apply patches only).', "boolean")
WRITE_PARAMS = (DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION)
LIST_PARAMS = (
    _query("allowWatchBookmarks", "Requests watch events with type BOOKMARK.", "boolean"),
    _query("continue", "The continue option should be set when retrieving more results from the server."),
    _query("fieldSelector", "A selector to restrict the list of returned objects by their fields."),
    _query("labelSelector", "A selector to restrict the list of returned objects by their labels."),
    _query("limit", "Maximum number of responses to return for a list call.", "integer"),
    _query("resourceVersion", "Constrains the resource versions a request may be served from."),
    _query("resourceVersionMatch", "Determines how resourceVersion is applied to list calls."),
    _query("sendInitialEvents", "Whether a watch starts with synthetic events for the current state.", "boolean"),
    _query("timeoutSeconds", "Timeout for the list/watch call.", "integer"),
    _query("watch", "Watch for changes to the described resources and return them as a stream.", "boolean"),
)
DELETE_PARAMS = (
    DRY_RUN,
    _query("gracePeriodSeconds", "The duration in seconds before the object should be deleted.", "integer"),
    _query("orphanDependents", "Deprecated: use propagationPolicy.", "boolean"),
    _query("propagationPolicy", "Whether and how garbage collection will be performed."),
)


def _responses(schema_ref: Schema, codes: Iterable[str], media: str = "application/json") -> Schema:
    names = {"200": "OK", "201": "Created", "202": "Accepted"}
    result: Schema = {code: {"description": names[code], "content": {media: {"schema": schema_ref}}} for code in codes}
    result["401"] = {"description": "Unauthorized"}
    return result


def _body(method: str, schema_ref: Schema) -> Schema | None:
    if method == "patch":
        return {"content": {t: {"schema": ref(PATCH)} for t in PATCH_CONTENT_TYPES}, "required": True}
    if method in ("put", "post"):
        return {"content": {"*/*": {"schema": schema_ref}}, "required": True}
    if method == "delete":
        return {"content": {"*/*": {"schema": ref(DELETE_OPTIONS)}}}
    return None


_DELETE_LIST = (*DELETE_PARAMS, *LIST_PARAMS)
# verb → (path: collection/item, HTTP method, x-kubernetes-action, operationId verb, parameters, response codes).
# kubectl sends fieldValidation=Strict only when the PATCH operation of the kind lists that parameter.
_VERB_OPS: tuple[tuple[str, str, str, str, str, tuple[Schema, ...], tuple[str, ...]], ...] = (
    ("list", "collection", "get", "list", "list", LIST_PARAMS, ("200",)),
    ("create", "collection", "post", "post", "create", WRITE_PARAMS, ("200", "201", "202")),
    ("deletecollection", "collection", "delete", "deletecollection", "deleteCollection", _DELETE_LIST, ("200",)),
    ("get", "item", "get", "get", "read", (), ("200",)),
    ("update", "item", "put", "put", "replace", WRITE_PARAMS, ("200", "201")),
    ("patch", "item", "patch", "patch", "patch", (*WRITE_PARAMS, FORCE), ("200", "201")),
    ("delete", "item", "delete", "delete", "delete", DELETE_PARAMS, ("200", "202")),
)
_METHOD_PARAMS: dict[str, tuple[tuple[Schema, ...], tuple[str, ...]]] = {
    "get": ((), ("200",)),
    "put": (WRITE_PARAMS, ("200", "201")),
    "patch": ((*WRITE_PARAMS, FORCE), ("200", "201")),
    "post": (WRITE_PARAMS, ("200", "201", "202")),
}


def _go_name(group: str, builtin: bool) -> str:
    """`kubevirtIo` / `core` / `coordination`: how kube names a group in operation ids and tags."""
    if not group:
        return "core"
    if builtin:
        group = group.removesuffix(".k8s.io")
    words = [w for part in group.split(".") for w in part.split("-")]
    return words[0].lower() + "".join(w.capitalize() for w in words[1:])


class _DocumentBuilder:
    """Builds the paths and schemas of one group-version document."""

    def __init__(self, group: str, version: str, resources: list[Resource]) -> None:
        self.group = group
        self.version = version
        self.resources = resources
        self.paths: dict[str, Schema] = {}
        self.schemas: dict[str, Schema] = meta_schemas()
        self.schemas[DELETE_OPTIONS]["x-kubernetes-group-version-kind"].append(gvk(group, version, "DeleteOptions"))
        go = _go_name(group, any(r.builtin for r in resources))
        self.tag = f"{go}_{version}"
        self.id_infix = go[0].upper() + go[1:] + version[0].upper() + version[1:]
        self.prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"

    def build(self) -> Schema:
        for resource in self.resources:
            self.schemas[resource_schema_name(resource)] = self._kind_schema(resource)
            list_name = schema_name(resource.group, resource.version, list_kind(resource), resource.builtin)
            self.schemas[list_name] = list_schema(resource)
            self._add_paths(resource)
        bearer = {
            "type": "apiKey",
            "description": "Bearer Token authentication",
            "name": "authorization",
            "in": "header",
        }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": GIT_VERSION},
            "paths": dict(sorted(self.paths.items())),
            "components": {"schemas": dict(sorted(self.schemas.items())), "securitySchemes": {"BearerToken": bearer}},
        }

    def _kind_schema(self, resource: Resource) -> Schema:
        """Kube's own schema for a built-in kind (with the definitions it refers to); the model's otherwise."""
        published = builtin_openapi.definition_name(resource.group, resource.version, resource.kind)
        if not resource.builtin or published is None:
            return kind_schema(resource)
        definitions = builtin_openapi.definitions_of(published, V3_REF_PREFIX, wrap_refs=True)
        for name, schema in definitions.items():
            self.schemas.setdefault(name, schema)
        return definitions[published]

    def _op(
        self, action: str, op_id: str, kind_gvk: dict[str, str], method: str, response: Schema, **kw: Any
    ) -> Schema:
        default_params, default_codes = _METHOD_PARAMS.get(method, ((), ("200",)))
        params, codes = kw.pop("params", default_params), kw.pop("codes", default_codes)
        op: Schema = {"description": f"{action} {kind_gvk['kind']}", "operationId": op_id, "tags": [self.tag]}
        op["parameters"] = list(params)
        body = _body(method, kw.pop("body", response))
        if body:
            op["requestBody"] = body
        op["responses"] = _responses(response, codes, kw.pop("media", "application/json"))
        op["x-kubernetes-action"] = action
        op["x-kubernetes-group-version-kind"] = dict(kind_gvk)
        return op

    def _add_paths(self, r: Resource) -> None:
        kind_gvk = gvk(r.group, r.version, r.kind)
        item_ref = ref(resource_schema_name(r))
        list_ref = ref(schema_name(r.group, r.version, list_kind(r), r.builtin))
        scope = "Namespaced" if r.namespaced else ""
        ns_params = [_path_param("namespace", "object name and auth scope, such as for teams and projects")]
        scope_params = ns_params if r.namespaced else []
        name_params = [_path_param("name", f"name of the {r.kind}"), *scope_params, PRETTY]
        collection = f"{self.prefix}{'/namespaces/{namespace}' if r.namespaced else ''}/{r.plural}"
        ops: dict[str, Schema] = {"collection": {}, "item": {}}
        for verb, where, method, action, id_verb, params, codes in _VERB_OPS:
            if verb in r.verbs:
                response = list_ref if verb == "list" else ref(STATUS) if "delete" in verb else item_ref
                op_id = f"{id_verb}{self.id_infix}{scope}{r.kind}"
                ops[where][method] = self._op(
                    action, op_id, kind_gvk, method, response, params=params, codes=codes, body=item_ref
                )
        if ops["collection"]:
            self.paths[collection] = {**ops["collection"], "parameters": [*scope_params, PRETTY]}
        if ops["item"]:
            self.paths[f"{collection}/{{name}}"] = {**ops["item"], "parameters": name_params}
        if r.namespaced and "list" in r.verbs:
            # kubectl get -A lists through the cluster-wide path.
            op_id = f"list{self.id_infix}{r.kind}ForAllNamespaces"
            list_all = self._op("list", op_id, kind_gvk, "get", list_ref, params=LIST_PARAMS)
            self.paths[f"{self.prefix}/{r.plural}"] = {"get": list_all, "parameters": [PRETTY]}
        for sub in sorted(r.subresources):
            self._add_subresource(r, sub, f"{collection}/{{name}}/{sub}", name_params)

    def _add_subresource(self, r: Resource, sub: str, path: str, path_params: list[Schema]) -> None:
        actions, other = _SUBRESOURCE_OPS.get(sub, ((("get", "get"),), None))
        sub_gvk, sub_ref = gvk(r.group, r.version, r.kind), ref(resource_schema_name(r))
        if other is not None:
            name = schema_name(*other, builtin=True)
            self.schemas.setdefault(name, open_kind_schema(f"{other[2]} ({sub} subresource of {r.kind}).", gvk(*other)))
            sub_gvk, sub_ref = gvk(*other), ref(name)
        scope = "Namespaced" if r.namespaced else ""
        path_ops: dict[str, Schema] = {}
        for method, action in actions:
            op_id = f"{_SUBRESOURCE_VERB[method]}{self.id_infix}{scope}{r.kind}{sub.capitalize()}"
            if sub in ("log", "exec", "portforward"):
                path_ops[method] = self._op(action, op_id, sub_gvk, method, {"type": "string"}, media="text/plain")
            else:
                path_ops[method] = self._op(action, op_id, sub_gvk, method, sub_ref)
        self.paths[path] = {**path_ops, "parameters": path_params}


def openapi_v3_document(registry: Registry, group: str, version: str) -> Schema | None:
    """The OpenAPI v3 document of one group-version, or None when nothing is served there."""
    resources = registry.in_group_version(group, version)
    if not resources:
        return None
    return _DocumentBuilder(group, version, resources).build()


def serialize(document: Schema) -> bytes:
    """Stable JSON bytes (sorted keys), so the content hash only changes when the content does."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def content_hash(body: bytes) -> str:
    """kube-apiserver's document hash: uppercase hex SHA-512."""
    return hashlib.sha512(body).hexdigest().upper()


def _index_from_hashes(hashes: dict[tuple[str, str], str]) -> Schema:
    paths = {}
    for (group, version), digest in sorted(hashes.items()):
        key = document_key(group, version)
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def _group_versions(registry: Registry) -> list[tuple[str, str]]:
    return sorted((group, version) for group, versions in registry.groups().items() for version in versions)


def openapi_v3_index(registry: Registry) -> Schema:
    """The body of GET /openapi/v3: each group-version's document URL with its content hash."""
    return OpenAPICache(registry).index()


def openapi_v2(registry: Registry) -> Schema:
    """The Swagger 2.0 document (/openapi/v2): every group-version's operations and definitions."""
    documents = (openapi_v3_document(registry, group, version) for group, version in _group_versions(registry))
    return openapi_v2_conversion.swagger(
        (d for d in documents if d is not None), {"title": "Kubernetes", "version": GIT_VERSION}
    )


class OpenAPICache:
    """Serialised documents and their hashes for one registry, rebuilt lazily when registry.generation moves."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._generation = registry.generation
        self._memo: dict[tuple[str, ...], tuple[Schema, bytes, str] | None] = {}

    def _get(self, key: tuple[str, ...], build: Callable[[], Schema | None]) -> tuple[Schema, bytes, str] | None:
        if self._generation != self._registry.generation:
            self._memo.clear()
            self._generation = self._registry.generation
        if key not in self._memo:
            document = build()
            body = serialize(document) if document is not None else b""
            self._memo[key] = (document, body, content_hash(body)) if document is not None else None
        return self._memo[key]

    def _document(self, group: str, version: str) -> tuple[Schema, bytes, str] | None:
        return self._get(("v3", group, version), lambda: openapi_v3_document(self._registry, group, version))

    def document(self, group: str, version: str) -> Schema | None:
        """The parsed document (shared: do not modify it), None when nothing is served at group/version."""
        entry = self._document(group, version)
        return entry[0] if entry else None

    def document_bytes(self, group: str, version: str) -> bytes | None:
        entry = self._document(group, version)
        return entry[1] if entry else None

    def hash(self, group: str, version: str) -> str | None:
        entry = self._document(group, version)
        return entry[2] if entry else None

    def _build_index(self) -> Schema:
        hashes = {gv: self.hash(*gv) for gv in _group_versions(self._registry)}
        return _index_from_hashes({gv: digest for gv, digest in hashes.items() if digest})

    def _index(self) -> tuple[Schema, bytes, str]:
        entry = self._get(("index",), self._build_index)
        assert entry is not None
        return entry

    def index(self) -> Schema:
        return self._index()[0]

    def index_bytes(self) -> bytes:
        return self._index()[1]

    def v2_bytes(self) -> bytes:
        entry = self._get(("v2",), lambda: openapi_v2(self._registry))
        assert entry is not None
        return entry[1]
