"""PATCH bodies by content type: JSON patch, merge patch and strategic merge (built-ins only).

Server-side apply patches are decoded here and applied by server_side_apply.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_patch import JSONPatchError, JSONPatchTestFailed, apply_patch
from pykubevirt.api.merge_patch import apply_merge_patch
from pykubevirt.apiserver import body_decoding, fields_v1, patch_meta
from pykubevirt.apiserver.strategic_merge_patch import StrategicMergeError, strategic_merge

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

CUSTOM_RESOURCE_PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
BUILTIN_PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH]


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def decode_patch(body: bytes, patch_type: str, max_bytes: int = 3 * 1024 * 1024) -> Any:
    """The patch body as a value within body_decoding's limits (depth, size once decoded, no NaN)."""
    try:
        if patch_type == APPLY_PATCH:
            return body_decoding.load_yaml(body, max_bytes)
        return body_decoding.load_json(body, max_bytes)
    except body_decoding.DecodeError as exc:
        if exc.too_large:
            raise errors.too_large(max_bytes) from exc
        raise errors.bad_request(f"error decoding patch: {exc}") from exc


def apply(
    current: dict[str, Any], patch: Any, patch_type: str, *, builtin: bool, share: bool = False
) -> dict[str, Any]:
    """The object after the patch, sharing nothing with `current`; 415 for patch types the resource does not take,
    422 for a failed `test`.

    `share`: the result is new only along the patch's paths and shares the rest with `current`, for a write that
    changes none of it in place (a status write takes only the status from it)."""
    if patch_type == JSON_PATCH:
        try:
            result = apply_patch(fields_v1.patch_target(current, patch), patch, share=share)
        except JSONPatchTestFailed as exc:
            raise errors.APIError(422, "Invalid", str(exc)) from exc
        except JSONPatchError as exc:
            raise errors.APIError(
                422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
    elif patch_type == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise errors.bad_request("a merge patch must be a JSON object")
        result = apply_merge_patch(current, patch, share=share)
    elif patch_type == STRATEGIC_MERGE_PATCH and builtin:
        if not isinstance(patch, dict):
            raise errors.bad_request("a strategic merge patch must be a JSON object")
        schema = patch_meta.schema_for(str(current.get("apiVersion") or ""), str(current.get("kind") or ""))
        try:
            # The merge shares what it does not change with its target; a copy keeps the stored object out of the
            # result.
            result = strategic_merge(current if share else copy_json(current), patch, schema)
        except StrategicMergeError as exc:
            raise errors.APIError(exc.code, "Invalid" if exc.code == 422 else "BadRequest", str(exc)) from exc
    else:
        accepted = BUILTIN_PATCH_TYPES if builtin else CUSTOM_RESOURCE_PATCH_TYPES
        raise errors.unsupported_media_type(patch_type, accepted)
    if not isinstance(result, dict):
        raise errors.APIError(422, "Invalid", "the patch turned the object into something that is not an object")
    return result
