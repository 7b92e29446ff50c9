"""Serving `<resource>/scale`: GET, PUT and PATCH of an autoscaling/v1 Scale, written through to the object.

As apiextensions-apiserver's ScaleREST: a write sets the object's spec replicas path and goes through the object's
own update (schema, `ValidateScaleSpec`, optimistic concurrency), not its admission webhooks, which KubeVirt
registers for the main resource only.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.scale import ScaleRefused, ScaleSubresource, scale_of, scaled, spec_replicas
from pykubevirt.apiserver import patching
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import RequestContext
from pykubevirt.apiserver.resources import Resource

# Strategic merge of a Scale is a merge: it has no lists. Apply is not taken on /scale here.
SCALE_PATCH_TYPES = [patching.JSON_PATCH, patching.MERGE_PATCH, patching.STRATEGIC_MERGE_PATCH]


def _paths(resource: Resource) -> ScaleSubresource:
    if resource.scale is None:
        raise errors.resource_not_found()
    return resource.scale


def get_scale(api: ObjectAPI, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
    return scale_of(api.get(resource, namespace, name), _paths(resource))


def update_scale(
    api: ObjectAPI, resource: Resource, namespace: str | None, name: str, body: Any, ctx: RequestContext
) -> dict[str, Any]:
    """PUT: the Scale's replicas, under its resourceVersion as a precondition when it names one."""
    paths = _paths(resource)
    meta = (body.get("metadata") or {}) if isinstance(body, dict) else {}
    if isinstance(meta, dict) and meta.get("name") and meta["name"] != name:
        raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
    return _write(api, resource, namespace, name, lambda _current: body, ctx, paths)


def patch_scale(
    api: ObjectAPI,
    resource: Resource,
    namespace: str | None,
    name: str,
    raw: bytes,
    media_type: str,
    ctx: RequestContext,
) -> dict[str, Any]:
    """PATCH: the patch applies to the Scale the object shows now."""
    paths = _paths(resource)
    if media_type not in SCALE_PATCH_TYPES:
        raise errors.unsupported_media_type(media_type, SCALE_PATCH_TYPES)
    patch = patching.decode_patch(raw, media_type, api.max_object_bytes)
    # Scale is a built-in kind: the strategic merge of its plain fields is a merge.
    patch_type = patching.MERGE_PATCH if media_type == patching.STRATEGIC_MERGE_PATCH else media_type

    def patched(current: dict[str, Any]) -> dict[str, Any]:
        return patching.apply(scale_of(current, paths), patch, patch_type, builtin=False)

    return _write(api, resource, namespace, name, patched, ctx, paths, patching_unset=True)


def _write(
    api: ObjectAPI,
    resource: Resource,
    namespace: str | None,
    name: str,
    new_scale: Any,
    ctx: RequestContext,
    paths: ScaleSubresource,
    *,
    patching_unset: bool = False,
) -> dict[str, Any]:
    current = api.get(resource, namespace, name)
    scale = new_scale(current)
    if patching_unset and spec_replicas(current, paths) is None and "replicas" not in (scale.get("spec") or {}):
        # kube: a patch that leaves an unset spec replicas unset has nothing to write there.
        raise errors.bad_request(f'the spec replicas field "{paths.spec_replicas_path}" cannot be empty')
    try:
        updated, version = scaled(current, paths, scale)
    except ScaleRefused as exc:
        raise errors.bad_request(str(exc)) from exc
    updated["metadata"]["resourceVersion"] = version or current["metadata"]["resourceVersion"]
    written = api.update(resource, namespace, name, updated, ctx, subresource="scale", owned=True)
    return scale_of(written, paths)
