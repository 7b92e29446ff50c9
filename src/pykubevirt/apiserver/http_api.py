"""The REST surface: Kubernetes paths and verbs mapped onto ObjectAPI, with Tables, watches and Status errors."""

from __future__ import annotations

import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from aiohttp import web

from pykubevirt.api import errors, json_codec
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.label_selectors import LabelSelector, SelectorError, parse_label_selector
from pykubevirt.api.scale import scale_table
from pykubevirt.apiserver import (
    accept_negotiation,
    body_decoding,
    patching,
    printers,
    protobuf,
    query_options,
    suspension,
)
from pykubevirt.apiserver.builtin_schemas import typed_request_body
from pykubevirt.apiserver.deletion import DeleteOptions
from pykubevirt.apiserver.eviction import Evictions
from pykubevirt.apiserver.list_streaming import STREAM_THRESHOLD, write_list
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.pod_validation import BINDING
from pykubevirt.apiserver.request_context import IGNORE, STRICT, WARN, RequestContext, UserInfo
from pykubevirt.apiserver.resources import Registry, Resource
from pykubevirt.apiserver.scale_subresource import get_scale, patch_scale, update_scale
from pykubevirt.apiserver.selectors import FieldSelector, escape_field_value, parse_field_selector
from pykubevirt.apiserver.served_versions import served
from pykubevirt.apiserver.watch import WatchHub, watch_events

T = TypeVar("T")

JSON = "application/json"
YAML = "application/yaml"
DEFAULT_WATCH_TIMEOUT_SECONDS = 1800
# What kube-apiserver answers to a successful binding or eviction.
CREATED_STATUS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
# The authenticated user of a request, set by the server's authentication middleware.
USER = web.RequestKey("user", UserInfo)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Target:
    """What a resource path names."""

    resource: Resource
    namespace: str | None
    name: str
    subresource: str


def warning_header(text: str) -> str:
    """A Warning header value as apimachinery's NewWarningHeader makes it: code 299, no agent, `"` and `\\` escaped.

    Go refuses text with control characters; they become spaces here so the warning is not lost.
    """
    cleaned = "".join(" " if unicodedata.category(c) == "Cc" else c for c in text)
    return '299 - "' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


def json_response(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    response = web.Response(body=json_codec.dumps(body), status=status, content_type=JSON)
    for warning in dict.fromkeys(warnings or ()):
        response.headers.add("Warning", warning_header(warning))
    return response


def error_response(error: errors.APIError) -> web.Response:
    response = json_response(error.status(), status=error.code)
    for key, value in error.headers.items():
        response.headers[key] = value
    return response


def parse_target(registry: Registry, path: str) -> Target:
    """Resolve `/api/v1/...` or `/apis/<g>/<v>/...` to a resource, namespace, name and subresource."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise errors.resource_not_found()
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = registry.get(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise errors.resource_not_found()
    resource = registry.get(group, version, rest[0])
    if resource is None:
        raise errors.resource_not_found()
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource and subresource not in resource.subresources:
        raise errors.resource_not_found()
    return Target(resource, namespace, name, subresource)


def table_version(accept: str) -> str | None:
    """The meta.k8s.io version of Table the client asks for, if it asks for one."""
    for media in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in media.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return params.get("v", "v1")
    return None


def _as_table(
    request: web.Request,
    columns: list[dict[str, Any]],
    rows: list[list[Any]],
    objects: list[dict[str, Any]],
    list_meta: dict[str, Any] | None,
) -> dict[str, Any]:
    """The printed columns and rows as the meta.k8s.io Table version the client asked for."""
    include = request.query.get("includeObject", "Metadata")
    table = printers.build_table(columns, rows, objects, include_object=include, list_meta=list_meta)
    table["apiVersion"] = f"meta.k8s.io/{table_version(request.headers.get('Accept', '')) or 'v1'}"
    return table


def _selectors(request: web.Request) -> tuple[LabelSelector | None, FieldSelector | None]:
    try:
        label = request.query.get("labelSelector")
        field = request.query.get("fieldSelector")
        return (
            parse_label_selector(label) if label else None,
            parse_field_selector(field) if field else None,
        )
    except SelectorError as exc:
        raise errors.bad_request(str(exc)) from exc


def _dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    for value in values:
        if value != "All":
            raise errors.bad_request(f'Invalid dryRun value: "{value}": supported values: "All"')
    return bool(values)


def _force(request: web.Request) -> bool | None:
    value = request.query.get("force")
    if value is None:
        return None
    # Go's strconv.ParseBool spellings, as query parameters are decoded.
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise errors.bad_request(f'invalid value for force: "{value}"')


def _field_validation(request: web.Request) -> str:
    value = request.query.get("fieldValidation", WARN) or WARN
    if value not in (STRICT, WARN, IGNORE):
        raise errors.bad_request(f"fieldValidation must be one of Ignore, Warn, or Strict, got {value}")
    return value


def _invalid_list_options(field: str, detail: str, reason: str) -> errors.APIError:
    return errors.invalid("ListOptions", "meta.k8s.io", "", [{"reason": reason, "message": detail, "field": field}])


def _exact_revision(request: web.Request) -> int | None:
    """The revision of a LIST with resourceVersionMatch=Exact; NotOlderThan is served from the latest state."""
    match = request.query.get("resourceVersionMatch", "")
    version = request.query.get("resourceVersion", "")
    if not match:
        return None
    if match not in ("Exact", "NotOlderThan"):
        raise _invalid_list_options(
            "resourceVersionMatch",
            f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan"',
            "FieldValueNotSupported",
        )
    if not version:
        raise _invalid_list_options(
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            "FieldValueForbidden",
        )
    revision = query_options.resource_version(version)
    if match != "Exact":
        return None
    if revision == 0:
        raise _invalid_list_options(
            "resourceVersionMatch",
            'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
            "FieldValueForbidden",
        )
    return revision


class RestHandlers:
    """aiohttp handlers for every resource path."""

    def __init__(self, api: ObjectAPI, hub: WatchHub, *, max_body_bytes: int, clock: Callable[[], datetime]) -> None:
        self.api = api
        self.hub = hub
        self.max_body_bytes = max_body_bytes
        self.clock = clock
        self.evictions = Evictions(api, clock)
        # Subresources another component answers (pods/log from the node), by (resource plural, subresource).
        self.subresource_handlers: dict[
            tuple[str, str], Callable[[web.Request, Target, UserInfo], Awaitable[web.StreamResponse]]
        ] = {}
        # Whether a write to a resource must be able to await admission webhooks (`apiserver --plain`).
        self.suspend_writes: Callable[[Resource], bool] = lambda resource: False
        # Validating admission of a DELETE: the resource, the object as stored, the request; refuses by raising.
        self.delete_admission: list[Callable[[Resource, dict[str, Any], RequestContext], None]] = []

    async def _write(self, resource: Resource, write: Callable[[], T]) -> T:
        """Run a request's write, where webhook admission can await its calls when any may apply."""
        if self.suspend_writes(resource):
            return await suspension.run_suspendable(write)
        return write()

    # --------------------------------------------------------------------------------------------------- entry

    async def handle(self, request: web.Request) -> web.StreamResponse:
        user = request[USER]
        try:
            target = parse_target(self.api.registry, request.path)
        except errors.APIError as exc:
            return error_response(exc)
        try:
            response = await self._dispatch(request, target, user)
        except errors.APIError as exc:
            response = error_response(exc)
        if target.resource.deprecation_warning and not response.prepared:
            # As kube's CRD handler: every request to a deprecated version is told so (a watch's before it starts).
            response.headers.add("Warning", warning_header(target.resource.deprecation_warning))
        return response

    async def _dispatch(self, request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
        method = request.method
        special = self.subresource_handlers.get((target.resource.plural, target.subresource))
        if special is not None:
            return await special(request, target, user)
        if target.resource.namespaced and target.namespace is None and method != "GET":
            if method != "POST" or target.name:
                raise errors.resource_not_found()
        accept_negotiation.check_acceptable(request.headers.get("Accept"))
        if method == "GET":
            watching = query_options.boolean_parameter(request.query, "watch")
            if target.name and not watching:
                return self._get(request, target)
            query_options.check_list_options(request.query)
            if watching:
                return await self._watch(request, target, single=bool(target.name))
            return await self._list(request, target)
        ctx = RequestContext(
            user=user,
            dry_run=_dry_run(request),
            field_validation=_field_validation(request),
            field_manager=request.query.get("fieldManager", ""),
            user_agent=request.headers.get("User-Agent", ""),
            force=_force(request),
        )
        if method == "POST":
            if target.subresource == "binding":
                return await self._bind(request, target, ctx)
            if target.subresource == "eviction":
                return await self._evict(request, target, ctx)
            if target.name:
                raise errors.method_not_allowed(method)
            body = await self._body(request)
            new_object = await self._write(
                target.resource, lambda: self.api.create(target.resource, target.namespace, body, ctx, owned=True)
            )
            return json_response(new_object, 201, ctx.warnings)
        if method == "PUT":
            if not target.name:
                raise errors.method_not_allowed(method)
            body = await self._body(request)
            if target.subresource == "scale":
                scale = await self._write(
                    target.resource,
                    lambda: update_scale(self.api, target.resource, target.namespace, target.name, body, ctx),
                )
                return json_response(scale, 200, ctx.warnings)
            updated = await self._write(
                target.resource,
                lambda: self.api.update(
                    target.resource,
                    target.namespace,
                    target.name,
                    body,
                    ctx,
                    subresource=target.subresource,
                    owned=True,
                ),
            )
            return json_response(updated, 200, ctx.warnings)
        if method == "PATCH":
            if not target.name:
                raise errors.method_not_allowed(method)
            raw = await self._raw_body(request)
            media_type = patching.media_type(request.headers.get("Content-Type"))
            if target.subresource == "scale":
                scale = await self._write(
                    target.resource,
                    lambda: patch_scale(self.api, target.resource, target.namespace, target.name, raw, media_type, ctx),
                )
                return json_response(scale, 200, ctx.warnings)
            patched, created = await self._write(
                target.resource,
                lambda: self.api.patch(
                    target.resource,
                    target.namespace,
                    target.name,
                    raw,
                    media_type,
                    ctx,
                    subresource=target.subresource,
                ),
            )
            return json_response(patched, 201 if created else 200, ctx.warnings)
        if method == "DELETE":
            body = await self._body(request, optional=True)
            options = DeleteOptions.from_body(typed_request_body(body), dict(request.query))
            ctx.dry_run = ctx.dry_run or options.dry_run
            if target.name:
                obj, _ = await self._write(target.resource, lambda: self._delete(target, options, ctx))
                return json_response(obj, 200, ctx.warnings)
            label, field = _selectors(request)
            deleted = self.api.delete_collection(
                target.resource, target.namespace, options, ctx, label_selector=label, field_selector=field
            )
            return json_response(self._list_body(target.resource, deleted, self.api.store.revision, ""))
        raise errors.method_not_allowed(method)

    def _delete(self, target: Target, options: DeleteOptions, ctx: RequestContext) -> tuple[dict[str, Any], bool]:
        """A DELETE of one object, after the admission that sees deletions (webhooks, in `--plain`)."""
        if self.delete_admission and not target.subresource:
            current = self.api.get(target.resource, target.namespace, target.name)
            for admit in self.delete_admission:
                admit(target.resource, current, ctx)
        return self.api.delete(target.resource, target.namespace, target.name, options, ctx)

    # --------------------------------------------------------------------------------------------------- bodies

    async def _raw_body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise errors.too_large(self.max_body_bytes)
        chunks = []
        size = 0
        async for chunk in request.content.iter_chunked(65536):
            size += len(chunk)
            if size > self.max_body_bytes:
                raise errors.too_large(self.max_body_bytes)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _body(self, request: web.Request, *, optional: bool = False) -> Any:
        raw = await self._raw_body(request)
        if not raw.strip():
            if optional:
                return None
            raise errors.bad_request("the request body is empty")
        content_type = patching.media_type(request.headers.get("Content-Type")) or JSON
        if content_type == protobuf.CONTENT_TYPE:
            return protobuf.decode(raw)
        if content_type not in (JSON, "*/*", "application/yaml", "application/x-yaml", "text/yaml"):
            raise errors.unsupported_media_type(content_type, [JSON, YAML])
        value = body_decoding.decode_body(raw, content_type, self.max_body_bytes)
        # Writes change the decoded body in place (it is theirs); YAML's aliases make one subtree appear at several
        # paths, which a change at one path (pruning, defaults) must not reach. The copy gives each its own.
        return value if content_type in (JSON, "*/*") else copy_json(value)

    # --------------------------------------------------------------------------------------------------- reads

    def _list_body(self, resource: Resource, items: list[dict[str, Any]], revision: int, token: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if token:
            meta["continue"] = token
        return {"kind": f"{resource.kind}List", "apiVersion": resource.api_version, "metadata": meta, "items": items}

    def _table(
        self,
        request: web.Request,
        resource: Resource,
        objects: list[dict[str, Any]],
        list_meta: dict[str, Any] | None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        now = now or self.clock()
        if resource.table is not None:
            columns, rows = resource.table(objects, now)
        else:
            columns, rows = printers.crd_columns_table(list(resource.printer_columns), objects, now)
        return _as_table(request, columns, rows, objects, list_meta)

    def _get(self, request: web.Request, target: Target) -> web.Response:
        if target.subresource == "scale":
            return self._get_scale(request, target)
        obj = self.api.get(target.resource, target.namespace, target.name)
        if target.subresource and target.subresource != "status":
            raise errors.method_not_allowed("GET")
        if table_version(request.headers.get("Accept", "")):
            return json_response(
                self._table(
                    request, target.resource, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                )
            )
        return json_response(obj)

    def _get_scale(self, request: web.Request, target: Target) -> web.Response:
        scale = get_scale(self.api, target.resource, target.namespace, target.name)
        if not table_version(request.headers.get("Accept", "")):
            return json_response(scale)
        columns, rows = scale_table([scale])
        meta = {"resourceVersion": scale["metadata"].get("resourceVersion", "")}
        return json_response(_as_table(request, columns, rows, [scale], meta))

    async def _list(self, request: web.Request, target: Target) -> web.StreamResponse:
        label, field = _selectors(request)
        minimum = query_options.resource_version(request.query.get("resourceVersion", ""))
        continue_token = request.query.get("continue", "")
        if continue_token and minimum:
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        exact_revision = _exact_revision(request)
        store = self.api.store
        if exact_revision is None and minimum > store.revision and not await query_options.reached(store, minimum):
            # Not older than a revision this server has not reached: kube's watch cache waits, then gives up.
            raise errors.too_large_resource_version(minimum, store.revision)
        # A limit of 0 or less lists everything, as kube's storage reads it.
        limit = max(query_options.optional_integer(request.query, "limit") or 0, 0)
        items, revision, token = self.api.list_objects(
            target.resource,
            target.namespace,
            label_selector=label,
            field_selector=field,
            limit=limit,
            continue_token=continue_token,
            exact_revision=exact_revision,
        )
        streamed = len(items) > STREAM_THRESHOLD
        if streamed:
            # Only once what it lists is on disk, as the middleware would wait for a response it returns.
            await store.durable()
        if table_version(request.headers.get("Accept", "")):
            meta: dict[str, Any] = {"resourceVersion": str(revision)}
            if token:
                meta["continue"] = token
            if not streamed:
                return json_response(self._table(request, target.resource, items, meta))
            # The rows are printed a chunk at a time too, all at the same moment (ages agree).
            now = self.clock()
            head = {k: v for k, v in self._table(request, target.resource, [], meta, now).items() if k != "rows"}

            def rows(chunk: list[dict[str, Any]]) -> list[Any]:
                table_rows: list[Any] = self._table(request, target.resource, chunk, None, now)["rows"]
                return table_rows

            return await write_list(request, head, items, field="rows", convert=rows)
        body = self._list_body(target.resource, items, revision, token)
        if streamed:
            return await write_list(request, {k: v for k, v in body.items() if k != "items"}, items)
        return json_response(body)

    async def _watch(self, request: web.Request, target: Target, *, single: bool) -> web.StreamResponse:
        label, field = _selectors(request)
        if single:
            # Names may hold characters a selector value must escape (RBAC names are only path segments).
            field = parse_field_selector("metadata.name=" + escape_field_value(target.name))
        send_initial = query_options.boolean_parameter(request.query, "sendInitialEvents")
        if "sendInitialEvents" in request.query and request.query.get("resourceVersionMatch") != "NotOlderThan":
            raise errors.APIError(
                422,
                "Invalid",
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch "
                "to NotOlderThan",
            )
        resource_version = request.query.get("resourceVersion", "")
        query_options.resource_version(resource_version)
        # An int64 as in kube's ListOptions (so no NaN or infinity); 0 is the server's default.
        timeout = float(query_options.optional_integer(request.query, "timeoutSeconds") or 0)
        if timeout == 0:
            timeout = DEFAULT_WATCH_TIMEOUT_SECONDS
        as_table = table_version(request.headers.get("Accept", "")) is not None
        # The initial and replayed events may include writes of this turn: send them only once they are on disk.
        await self.hub.store.durable()
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache"})
        if target.resource.deprecation_warning:
            response.headers.add("Warning", warning_header(target.resource.deprecation_warning))
        response.enable_chunked_encoding()
        await response.prepare(request)
        first_table = True
        try:
            async for batch in watch_events(
                self.hub,
                target.resource,
                target.namespace,
                label_selector=label,
                field_selector=field,
                resource_version=resource_version,
                send_initial_events=send_initial,
                allow_bookmarks=query_options.boolean_parameter(request.query, "allowWatchBookmarks"),
                timeout_seconds=timeout,
            ):
                lines = []
                for kind, stored_obj, stored_encoding in batch:
                    obj, encoded = stored_obj, stored_encoding
                    if target.resource.storage_version and kind not in ("BOOKMARK", "ERROR"):
                        obj = served(target.resource, stored_obj)
                        if obj is not stored_obj:
                            encoded = None  # the shared encoding is of the stored version
                    payload = obj
                    if as_table and kind not in ("BOOKMARK", "ERROR"):
                        payload = self._table(
                            request,
                            target.resource,
                            [obj],
                            {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                        )
                        if not first_table:
                            payload["columnDefinitions"] = []
                        first_table = False
                    if payload is obj and encoded is not None:
                        # The store's row of a committed object: encoded once for every watcher it reaches.
                        lines.append(b'{"type":"' + kind.encode() + b'","object":' + encoded + b"}\n")
                    else:
                        lines.append(json_codec.dumps({"type": kind, "object": payload}) + b"\n")
                # The events ready together leave in one chunk: one send, and one read for the client.
                await response.write(b"".join(lines))
        except ConnectionResetError:
            pass  # the client went away; the watcher is unregistered as the generator closes
        return response

    # --------------------------------------------------------------------------------------------------- pods

    async def _bind(self, request: web.Request, target: Target, ctx: RequestContext) -> web.Response:
        binding = typed_request_body(await self._body(request), kind="Binding") or {}
        node = (binding.get("target") or {}).get("name")
        if not node:
            raise errors.invalid_field(
                "Binding", "", target.name, "target.name", "Required value", "FieldValueRequired"
            )
        pod = self.api.get(target.resource, target.namespace, target.name)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.conflict("pods", "", target.name, "pod is being deleted, cannot be assigned to a host")
        assigned = (pod.get("spec") or {}).get("nodeName")
        if assigned:
            raise errors.conflict(
                "pods", "", target.name, f'pod {target.name} is already assigned to node "{assigned}"'
            )
        # Only spec.nodeName changes: the rest is the stored pod's, shared (a pod update changes its object in place
        # only at the top level and in its metadata, which are new here).
        updated = {**pod, "metadata": dict(pod["metadata"]), "spec": {**pod["spec"], "nodeName": node}}
        ctx.subresource = BINDING
        self.api.update(target.resource, target.namespace, target.name, updated, ctx, owned=True)
        return json_response(CREATED_STATUS, 201)

    async def _evict(self, request: web.Request, target: Target, ctx: RequestContext) -> web.Response:
        body = await self._body(request, optional=True)
        eviction = typed_request_body(body, kind="Eviction")
        await self._write(
            target.resource, lambda: self.evictions.evict(target.resource, target.namespace, target.name, eviction, ctx)
        )
        return json_response(CREATED_STATUS, 201)
