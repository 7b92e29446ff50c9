"""The two-way strategic merge patch from one object to another, as the kubelet sends its pod status.

A writer that owns only some fields sends just what it changed: a keyed list (pod conditions by type) names only the
items that changed, so items other writers added in the meantime survive, and no resourceVersion guard is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# PodStatus's lists with patchStrategy "merge", by their patchMergeKey; containerStatuses and the rest are atomic.
POD_STATUS_MERGE_KEYS: Mapping[str, str] = {"conditions": "type", "podIPs": "ip", "hostIPs": "ip"}


def two_way_merge_patch(
    old: Mapping[str, Any], new: Mapping[str, Any], merge_keys: Mapping[str, str]
) -> dict[str, Any]:
    """What turns `old` into `new` under strategic merge: changed keys, null for removed ones, keyed lists by item."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if value is None:
            if before is not None:
                patch[key] = None
            continue
        if before == value:
            continue
        if isinstance(value, dict) and isinstance(before, dict):
            change: Any = two_way_merge_patch(before, value, merge_keys)
        elif isinstance(value, list) and isinstance(before, list) and key in merge_keys:
            change = _keyed_list_patch(before, value, merge_keys[key], merge_keys)
        else:
            patch[key] = value
            continue
        # Empty when a keyed list was only reordered, or a map differed only by a null member (absent either way).
        if change:
            patch[key] = change
    for key, before in old.items():
        if key not in new and before is not None:
            patch[key] = None
    return patch


def _keyed_list_patch(old: list[Any], new: list[Any], merge_key: str, merge_keys: Mapping[str, str]) -> list[Any]:
    """The items of a keyed list that changed, each with its key; a removed item as a `$patch: delete` directive."""
    if not all(isinstance(item, dict) and merge_key in item for item in (*old, *new)):
        return new
    before = {item[merge_key]: item for item in old}
    patch: list[Any] = []
    for item in new:
        previous = before.get(item[merge_key])
        if previous is None:
            patch.append(item)
        elif previous != item:
            patch.append({merge_key: item[merge_key], **two_way_merge_patch(previous, item, merge_keys)})
    kept = {item[merge_key] for item in new}
    patch += [{merge_key: key, "$patch": "delete"} for key in before if key not in kept]
    return patch
