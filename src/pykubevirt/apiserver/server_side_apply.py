"""Server-side apply: merge an applied configuration, drop what its manager stopped applying, refuse conflicts.

This is structured-merge-diff's Updater.Apply under kube-apiserver's field-manager layers: the applier owns exactly
the fields of its configuration; fields it applied before and left out are removed unless another manager owns them;
changing a field another manager owns is a 409 unless `force` moves the ownership. `kubectl` as manager may take over
what a client-side apply's last-applied annotation still describes, and keeps that annotation in step.
"""

from __future__ import annotations

import json
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver.field_sets import (
    FieldSet,
    difference,
    intersection,
    path_string,
    paths,
    recursive_difference,
    union,
)
from pykubevirt.apiserver.field_types import FieldType, kind_type
from pykubevirt.apiserver.managed_fields import (
    APPLY,
    STRIPPED,
    UPDATE,
    Entry,
    EntryKey,
    Managed,
    conflicts_with,
    decode,
    empty_object,
    reset_fields,
    store,
    take_from_others,
    without_managed_fields,
)
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.typed_fields import compare, ensure_named_fields, field_set, merge, remove

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Only kubectl's own server-side apply upgrades from, and keeps up, client-side apply's annotation.
KUBECTL = "kubectl"


class Conflicts(Exception):
    """Fields an apply would change that other managers own, by manager."""

    def __init__(self, conflicts: dict[EntryKey, FieldSet]) -> None:
        super().__init__("apply conflicts")
        self.conflicts = conflicts


def apply(
    resource: Resource,
    live: dict[str, Any] | None,
    config: dict[str, Any],
    *,
    manager: str,
    subresource: str,
    force: bool,
    now: str,
) -> dict[str, Any]:
    """The object after `manager` applies `config` to `live` (None: it does not exist yet), with managedFields."""
    _check_config(resource, config)
    t = kind_type(resource)
    managed = _live_entries(live)
    before = without_managed_fields(copy_json(live)) if live is not None else empty_object(resource)
    key: EntryKey = (manager, APPLY, "", subresource)
    ignored = reset_fields(resource, subresource)
    previous = managed.get(key)
    try:
        new, managed = _apply(managed, before, copy_json(config), t, key, force=force, ignored=ignored)
    except Conflicts as exc:
        allowed = _client_side_applied(before, t, resource.api_version) if manager == KUBECTL else None
        if allowed is None:
            raise conflict_error(exc.conflicts) from exc
        remaining = {}
        for owner, fields in exc.conflicts.items():
            left = difference(fields, allowed)
            if left:
                remaining[owner] = left
        if remaining:
            raise conflict_error(remaining) from exc
        new, managed = _apply(managed, before, copy_json(config), t, key, force=True, ignored=ignored)
    entry = managed.get(key)
    if entry is not None:
        changed = new != before
        time = now if changed else previous.time if previous is not None else None
        managed[key] = Entry(manager, APPLY, resource.api_version, time, entry.fields, subresource)
    if manager == KUBECTL:
        _keep_last_applied(before, new, config)
    store(new, managed)
    return new


def _check_config(resource: Resource, config: dict[str, Any]) -> None:
    api_version = str(config.get("apiVersion") or "")
    kind = str(config.get("kind") or "")
    if api_version != resource.api_version or kind != resource.kind:
        group, _, version = api_version.rpartition("/")
        raise errors.bad_request(f"invalid object type: {group}/{version}, Kind={kind}")
    meta = config.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields") is not None:
        raise errors.bad_request("metadata.managedFields must be nil")


def _live_entries(live: dict[str, Any] | None) -> Managed:
    entries = ((live or {}).get("metadata") or {}).get("managedFields")
    # Entries written by someone else are checked before they are trusted (a broken list starts afresh).
    return (decode(entries, check_fields=True) or {}) if entries else {}


def _apply(
    managed: Managed,
    before: dict[str, Any],
    config: dict[str, Any],
    t: FieldType,
    key: EntryKey,
    *,
    force: bool,
    ignored: FieldSet,
) -> tuple[dict[str, Any], Managed]:
    merged = merge(copy_json(before), config, t)
    last = managed.get(key)
    applied = recursive_difference(field_set(config, t), ignored)
    owned = {k: e.fields for k, e in managed.items()}
    owned[key] = applied
    new = _prune(merged, owned, last.fields if last is not None else None, t)
    added, modified, removed = compare(before, new, t)
    if ignored:
        added = recursive_difference(added, ignored)
        modified = recursive_difference(modified, ignored)
        removed = recursive_difference(removed, ignored)
    changed = union(modified, added)
    conflicts = conflicts_with(managed, changed, applier=key)
    if conflicts and not force:
        raise Conflicts(conflicts)
    result = take_from_others(managed, changed, removed, keep=key)
    fields = difference(applied, STRIPPED)
    if fields:
        result[key] = Entry(key[0], APPLY, "", None, fields, key[3])
    else:
        result.pop(key, None)
    return new, result


def _prune(merged: dict[str, Any], owned: dict[EntryKey, FieldSet], last: FieldSet | None, t: FieldType) -> Any:
    """Remove what the applier applied last time and not now, unless someone still owns it (Updater.prune)."""
    if not last:
        return merged
    last_named = ensure_named_fields(last, t)
    pruned = remove(merged, last_named, t)
    # Add back what anybody (the applier's new configuration included) owns.
    everyone: FieldSet = {}
    for fields in owned.values():
        everyone = union(everyone, fields)
    merged_set = ensure_named_fields(field_set(merged, t), t)
    pruned_set = ensure_named_fields(field_set(pruned, t), t)
    keep = union(pruned_set, ensure_named_fields(everyone, t))
    pruned = remove(merged, difference(merged_set, keep), t)
    # Add back what the applier never owned (dangling items).
    pruned_set = ensure_named_fields(field_set(pruned, t), t)
    return remove(merged, intersection(difference(merged_set, pruned_set), last_named), t)


def _client_side_applied(before: dict[str, Any], t: FieldType, api_version: str) -> FieldSet | None:
    """The fields client-side apply's annotation still describes as the live object has them (the upgrade path)."""
    annotations = (before.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED) if isinstance(annotations, dict) else None
    if not isinstance(text, str) or not text:
        return None
    try:
        last_applied = json.loads(text)
    except ValueError:
        return None
    if not isinstance(last_applied, dict) or last_applied.get("apiVersion") != api_version:
        return None
    added, modified, removed = compare(last_applied, before, t)
    return difference(difference(difference(field_set(last_applied, t), modified), added), removed)


def _keep_last_applied(before: dict[str, Any], new: dict[str, Any], config: dict[str, Any]) -> None:
    """kubectl's server-side apply rewrites an existing last-applied annotation to its configuration."""
    annotations = (before.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict) or LAST_APPLIED not in annotations:
        return
    meta = new.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), LAST_APPLIED: last_applied_text(config)}


def last_applied_text(config: dict[str, Any]) -> str:
    """The configuration without the annotation itself, as Go's encoder writes it (sorted keys, HTML escaped)."""
    body = copy_json(config)
    annotations = (body.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
        if not annotations:
            del body["metadata"]["annotations"]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + "\n"


# ------------------------------------------------------------------------------------------------- conflicts


def _printed_manager(key: EntryKey) -> str:
    manager, operation, api_version, subresource = key
    printed = json.dumps(manager, ensure_ascii=False)
    if subresource:
        printed += f' with subresource "{subresource}"'
    if operation == UPDATE:
        printed += f" using {api_version}"
    return printed


def conflict_error(conflicts: dict[EntryKey, FieldSet]) -> errors.APIError:
    """409 with kube's text: one line for one conflict, else the paths grouped by manager."""
    found = [(owner, path_string(path)) for owner in sorted(conflicts) for path in paths(conflicts[owner])]
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {_printed_manager(owner)}", "field": field}
        for owner, field in found
    ]
    if len(found) == 1:
        owner, field = found[0]
        message = f"Apply failed with 1 conflict: conflict with {_printed_manager(owner)}: {field}"
    else:
        lines = []
        for owner in sorted(conflicts):
            lines.append(f"conflicts with {_printed_manager(owner)}:")
            lines.extend(f"- {field}" for o, field in found if o == owner)
        message = f"Apply failed with {len(found)} conflicts: " + "\n".join(lines)
    return errors.APIError(409, "Conflict", message, details={"causes": causes})
