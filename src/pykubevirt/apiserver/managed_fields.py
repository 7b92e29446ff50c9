"""`metadata.managedFields`: who owns which fields, kept up to date on every write as kube-apiserver's field manager.

An Update (create, update, non-apply patch) gives its manager the fields it added or changed and takes them from
everyone else; removed fields leave every set. Entries are keyed by manager, operation, subresource and, for
updates, the API version, and at most ten update entries are kept. Writes that change nothing cost one comparison.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pykubevirt.api import errors
from pykubevirt.apiserver import fields_v1
from pykubevirt.apiserver.field_sets import FieldSet, difference, intersection, recursive_difference, union
from pykubevirt.apiserver.field_types import FieldType, kind_type
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.typed_fields import compare

log = logging.getLogger("pykubevirt.apiserver.fieldmanager")

APPLY = "Apply"
UPDATE = "Update"
FIELDS_V1 = "FieldsV1"
MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES = "ancient-changes"
FIELD_MANAGER_MAX_LENGTH = 128

# Fields nobody owns: identity and server-set metadata (stripMetaManager's set; `metadata` itself, not its content).
STRIPPED: FieldSet = {
    "f:apiVersion": {},
    "f:kind": {},
    "f:metadata": {
        ".": {},
        "f:name": {},
        "f:namespace": {},
        "f:creationTimestamp": {},
        "f:selfLink": {},
        "f:uid": {},
        "f:clusterName": {},
        "f:generation": {},
        "f:managedFields": {},
        "f:resourceVersion": {},
    },
}

EntryKey = tuple[str, str, str, str]


@dataclass(slots=True)
class Entry:
    """One managedFields entry; `raw` is the stored dict (its fieldsV1 as text), reused while the entry does not
    change."""

    manager: str
    operation: str
    api_version: str
    time: str | None
    fields: FieldSet
    subresource: str = ""
    raw: dict[str, Any] | None = None

    @property
    def key(self) -> EntryKey:
        # Appliers keep one entry across API versions; updaters get one per version (BuildManagerIdentifier).
        version = self.api_version if self.operation == UPDATE else ""
        return (self.manager, self.operation, version, self.subresource)

    def encode(self) -> dict[str, Any]:
        if self.raw is not None:
            return self.raw
        entry: dict[str, Any] = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:
            entry["time"] = self.time
        entry["fieldsType"] = FIELDS_V1
        # The next write of this object decodes the stored text again; it finds the set it was made from.
        entry["fieldsV1"] = fields_v1.encoded(self.fields, remember=True)
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry

    def with_fields(self, fields: FieldSet, time: str | None = None) -> Entry:
        return Entry(self.manager, self.operation, self.api_version, time or self.time, fields, self.subresource)


Managed = dict[EntryKey, Entry]


def manager_name(field_manager: str, user_agent: str) -> str:
    """The request's manager: its fieldManager, else its user agent's program name (kubectl, virt-controller)."""
    return field_manager or user_agent.split("/", 1)[0]


def options_error(options_kind: str, field_manager: str, *, apply: bool = False, force: bool | None = None) -> None:
    """kube's Create/Update/PatchOptions checks: fieldManager set for apply, at most 128 bytes, printable."""
    causes = []
    if options_kind == "PatchOptions" and not apply and force is not None:
        causes.append(("FieldValueForbidden", "force", "Forbidden: may not be specified for non-apply patch"))
    if apply and not field_manager:
        causes.append(("FieldValueRequired", "fieldManager", "Required value: is required for apply patch"))
    if len(field_manager.encode()) > FIELD_MANAGER_MAX_LENGTH:
        detail = f"Too long: may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes"
        causes.append(("FieldValueTooLong", "fieldManager", detail))
    for position, char in enumerate(field_manager):
        if not char.isprintable():
            detail = f'Invalid value: "{field_manager}": invalid character U+{ord(char):04X} (at position {position})'
            causes.append(("FieldValueInvalid", "fieldManager.fieldManager", detail))
            break
    if causes:
        rendered = [f"{field}: {detail}" for _, field, detail in causes]
        body = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
        raise errors.APIError(
            422,
            "Invalid",
            f'{options_kind}.meta.k8s.io "" is invalid: {body}',
            details={
                "group": "meta.k8s.io",
                "kind": options_kind,
                "causes": [{"reason": r, "message": d, "field": f} for r, f, d in causes],
            },
        )


# ------------------------------------------------------------------------------------------------- entries


def _valid_fields(node: Any, depth: int = 0) -> bool:
    if not isinstance(node, dict) or depth > 100:
        return False
    return all(
        isinstance(key, str) and (key == "." or key[:2] in ("f:", "k:", "v:", "i:")) and _valid_fields(child, depth + 1)
        for key, child in node.items()
    )


def decode(entries: Any, *, check_fields: bool) -> Managed | None:
    """The entries of a managedFields list; None when it is not one (kube then falls back, or starts afresh)."""
    if not isinstance(entries, list):
        return None
    managed: Managed = {}
    for raw in entries:
        if not isinstance(raw, dict):
            return None
        operation = raw.get("operation")
        stored_fields = raw.get("fieldsV1", {})
        fields = fields_v1.decoded(stored_fields)
        time = raw.get("time")
        if (
            operation not in (APPLY, UPDATE)
            or raw.get("fieldsType", FIELDS_V1) != FIELDS_V1
            or not all(isinstance(raw.get(k, ""), str) for k in ("manager", "apiVersion", "subresource"))
            or (time is not None and not isinstance(time, str))
            or (check_fields and not _valid_fields(fields))
        ):
            return None
        entry = Entry(
            raw.get("manager", ""),
            operation,
            raw.get("apiVersion", ""),
            time,
            fields,
            raw.get("subresource", ""),
            # Stored entries are trusted and reused as they are; sent ones (and stored ones not yet kept as text)
            # are re-encoded.
            None if check_fields or type(stored_fields) is not bytes else raw,
        )
        if entry.key in managed:
            return None
        managed[entry.key] = entry
    return managed


def encode(managed: Managed) -> list[dict[str, Any]]:
    """Entries in kube's order: by operation, time, manager, API version and subresource."""
    ordered = sorted(
        managed.values(), key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource)
    )
    return [entry.encode() for entry in ordered]


def live_or_new(live: dict[str, Any] | None, new: dict[str, Any], *, subresource: str) -> Managed:
    """The entries a write starts from: the ones sent, unless absent, empty or broken (then the stored ones).

    `managedFields: []` or `[{}]` clears them; subresources never set them (decodeLiveOrNew).
    """
    live_entries = ((live or {}).get("metadata") or {}).get("managedFields")
    sent = (new.get("metadata") or {}).get("managedFields")
    if not subresource and sent is not None and sent is not live_entries and not _same_entries(sent, live_entries):
        if sent == [] or sent == [{}]:
            return {}
        decoded = decode(sent, check_fields=True)
        if decoded:
            return decoded
    if not live_entries:
        return {}
    return decode(live_entries, check_fields=False) or {}


def _same_entries(sent: Any, live: Any) -> bool:
    """Whether the sent entries are the stored ones: clients send back what they read (fieldsV1 as JSON), so the
    stored text is compared with the sent set's encoding before anything is decoded or checked."""
    if not isinstance(sent, list) or not isinstance(live, list) or len(sent) != len(live):
        return False
    for sent_entry, live_entry in zip(sent, live, strict=True):
        if not isinstance(sent_entry, dict) or not isinstance(live_entry, dict):
            return False
        if sent_entry.keys() != live_entry.keys():
            return False
        for key, live_value in live_entry.items():
            sent_value = sent_entry[key]
            if key == "fieldsV1" and type(live_value) is bytes and type(sent_value) is dict:
                if not fields_v1.same_text(sent_value, live_value):
                    return False
            elif sent_value != live_value or type(sent_value) is not type(live_value):
                return False
    return True


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy without metadata.managedFields (what the comparisons see)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def store(obj: dict[str, Any], managed: Managed) -> None:
    """Write the entries into the object's metadata (in place), dropping the field when there are none."""
    meta = obj.setdefault("metadata", {})
    if managed:
        meta["managedFields"] = encode(managed)
    else:
        meta.pop("managedFields", None)


def restore(obj: dict[str, Any], entries: list[dict[str, Any]] | None) -> None:
    """Put back the entries an apply computed (in place) after a step that rebuilt the object's metadata."""
    meta = obj.setdefault("metadata", {})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)


# ------------------------------------------------------------------------------------------------- resources


def reset_fields(resource: Resource, subresource: str) -> FieldSet:
    """Fields a write to this endpoint cannot set, so nobody gains them by writing there (GetResetFields)."""
    if subresource == "status":
        return {"f:spec": {}}
    if resource.has_status and not subresource:
        return {"f:status": {}}
    return {}


def empty_object(resource: Resource) -> dict[str, Any]:
    """What a create is compared against: an empty object of the kind (built-ins have empty spec and status)."""
    obj: dict[str, Any] = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": {}}
    if resource.builtin:
        root = kind_type(resource)
        for name in ("spec", "status"):
            if root.declares(name):
                obj[name] = {}
    return obj


# ------------------------------------------------------------------------------------------------- updates


def track(
    resource: Resource,
    live: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    subresource: str,
    now: str,
) -> dict[str, Any]:
    """The new object with managedFields updated for an Update by `manager` (in place, and returned).

    Stored entries that turn out broken are started afresh, as kube does with undecodable ones; should tracking still
    fail, managedFields are dropped rather than the write (UpdateNoErrors).
    """
    before = without_managed_fields(live) if live is not None else empty_object(resource)
    after = without_managed_fields(new)
    managed: Managed = {}
    for fresh in (False, True):
        try:
            managed = update(
                {} if fresh else live_or_new(live, new, subresource=subresource),
                before,
                after,
                kind_type(resource),
                manager=manager,
                api_version=resource.api_version,
                subresource=subresource,
                now=now,
                ignored=reset_fields(resource, subresource),
            )
            break
        except (TypeError, AttributeError, ValueError, KeyError, RecursionError) as exc:
            name = (new.get("metadata") or {}).get("name")
            log.error("[SHOULD NOT HAPPEN] failed to update managedFields of %s %r: %s", resource.kind, name, exc)
            managed = {}
    store(new, managed)
    return new


def update(
    managed: Managed,
    old: dict[str, Any],
    new: dict[str, Any],
    t: FieldType,
    *,
    manager: str,
    api_version: str,
    subresource: str,
    now: str,
    ignored: FieldSet,
) -> Managed:
    """structured-merge-diff's Updater.Update under kube's managedFieldsUpdater, stripMeta and capManagers."""
    added, modified, removed = compare(old, new, t)
    if ignored:
        added = recursive_difference(added, ignored)
        modified = recursive_difference(modified, ignored)
        removed = recursive_difference(removed, ignored)
    if not (added or modified or removed):
        return managed
    changed = union(modified, added)
    result = take_from_others(managed, changed, removed, keep=None)
    owned = difference(changed, STRIPPED)
    if owned:
        key = (manager, UPDATE, api_version, subresource)
        previous = result.get(key)
        if previous is not None:
            result[key] = previous.with_fields(union(owned, previous.fields), now)
        else:
            result[key] = Entry(manager, UPDATE, api_version, now, owned, subresource)
    return cap_update_managers(result)


def take_from_others(managed: Managed, changed: FieldSet, removed: FieldSet, *, keep: EntryKey | None) -> Managed:
    """Every other entry loses the fields that changed and the ones removed; entries left empty go."""
    result: Managed = {}
    for key, entry in managed.items():
        if key == keep:
            result[key] = entry
            continue
        fields = entry.fields
        if changed:
            lost = intersection(fields, changed)
            if lost:
                fields = difference(fields, lost)
        if removed:
            fields = difference(fields, removed)
        if fields is entry.fields:
            result[key] = entry
        elif fields:
            result[key] = entry.with_fields(fields)
    return result


def conflicts_with(managed: Managed, changed: FieldSet, *, applier: EntryKey) -> dict[EntryKey, FieldSet]:
    """The fields each other entry owns that an apply changes."""
    found = {}
    for key, entry in managed.items():
        if key != applier:
            lost = intersection(entry.fields, changed)
            if lost:
                found[key] = lost
    return found


def cap_update_managers(managed: Managed) -> Managed:
    """Fold the oldest update entries into an `ancient-changes` entry per API version until ten remain."""
    updaters = [key for key, entry in managed.items() if entry.operation == UPDATE]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return managed
    updaters.sort(key=lambda key: (managed[key].time or "", key))
    result = dict(managed)
    first_of_version: dict[str, EntryKey] = {}
    count = len(updaters)
    for key in updaters:
        if count <= MAX_UPDATE_MANAGERS:
            break
        entry = result[key]
        version = entry.api_version
        bucket = (ANCIENT_CHANGES, UPDATE, version, "")
        first = first_of_version.get(version)
        if first is None:
            first_of_version[version] = key
            continue
        if bucket not in result:
            seed = result.pop(first)
            result[bucket] = Entry(ANCIENT_CHANGES, UPDATE, version, seed.time, seed.fields)
        merged = union(entry.fields, result[bucket].fields)
        result[bucket] = Entry(ANCIENT_CHANGES, UPDATE, version, entry.time, merged)
        del result[key]
        count -= 1
    return result
