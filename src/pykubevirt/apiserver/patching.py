"""PATCH bodies by content type: JSON patch, merge patch and strategic merge (built-ins only).

Server-side apply patches are decoded here and applied by server_side_apply.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_patch import JSONPatchError, JSONPatchTestFailed, apply_patch
from pykubevirt.api.merge_patch import apply_merge_patch
from pykubevirt.apiserver import body_decoding, fields_v1

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

CUSTOM_RESOURCE_PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
BUILTIN_PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH]

# Lists kube-apiserver merges by key under strategic merge patch (the ones our components and kubectl touch). A list
# without a patchMergeKey (a pod's containerStatuses, say) is atomic: the patch's list replaces it.
_STRATEGIC_LIST_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "readinessGates": "conditionType",
    "tolerations": "key",
    "podIPs": "ip",
    "hostIPs": "ip",
    "ports": "containerPort",
    # Mutating/ValidatingWebhookConfiguration: `kubectl apply` of a changed webhook patches it by name.
    "webhooks": "name",
}


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


def _strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, dict) and isinstance(target, dict):
        result = dict(target)
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            if value is None:
                result.pop(key, None)
            else:
                result[key] = _strategic_merge(result.get(key), value, key)
        return result
    if isinstance(patch, list) and isinstance(target, list) and field in _STRATEGIC_LIST_KEYS:
        merge_key = _STRATEGIC_LIST_KEYS[field]
        merged = list(target)
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                return patch
            position = next(
                (i for i, old in enumerate(merged) if isinstance(old, dict) and old.get(merge_key) == item[merge_key]),
                None,
            )
            if item.get("$patch") == "delete":
                if position is not None:
                    merged.pop(position)
            elif position is None:
                merged.append(item)
            else:
                merged[position] = _strategic_merge(merged[position], item, "")
        return merged
    return patch


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
        # The merge shares what it does not change with its target; a copy keeps the stored object out of the result.
        result = _strategic_merge(current if share else copy_json(current), patch)
    else:
        accepted = BUILTIN_PATCH_TYPES if builtin else CUSTOM_RESOURCE_PATCH_TYPES
        raise errors.unsupported_media_type(patch_type, accepted)
    if not isinstance(result, dict):
        raise errors.APIError(422, "Invalid", "the patch turned the object into something that is not an object")
    return result
