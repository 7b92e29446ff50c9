"""RFC 7386 JSON Merge Patch."""

from __future__ import annotations

from typing import Any

from pykubevirt.api.json_copy import copy_json


def apply_merge_patch(target: Any, patch: Any, *, share: bool = False) -> Any:
    """Merge `patch` into a copy of `target`: objects merge per key, `null` deletes, everything else replaces.

    `share`: the result shares what the patch does not reach with `target` (new objects only along the patch's
    paths), for a caller that changes none of it in place."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    if share:
        return _merged(target if isinstance(target, dict) else {}, patch)
    result = copy_json(target) if isinstance(target, dict) else {}
    _merge_into(result, patch)
    return result


def _merged(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            child = result.get(key)
            result[key] = _merged(child if isinstance(child, dict) else {}, value)
        else:
            result[key] = copy_json(value)
    return result


def _merge_into(result: dict[str, Any], patch: dict[str, Any]) -> None:
    # `result` is already a private copy, so nested objects are merged in place rather than copied again per level.
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            child = result.get(key)
            if not isinstance(child, dict):
                child = result[key] = {}
            _merge_into(child, value)
        else:
            result[key] = copy_json(value)


def make_merge_patch(old: Any, new: Any) -> Any:
    """A merge patch turning `old` into `new` (lists are replaced whole, removed keys become null)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return copy_json(new)
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = copy_json(value)
        elif old[key] != value:
            patch[key] = make_merge_patch(old[key], value)
    return patch
