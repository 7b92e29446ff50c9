"""Where a built-in kind's strategic merge patch merges: each field's patch strategy and merge key.

kube-apiserver reads them from its Go types' struct tags; kube's published OpenAPI carries the same tags as
`x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key`, so the schema is walked as a patch walks the object.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pykubevirt.apiserver import builtin_openapi

_REF_PREFIX = "#/$defs/"


@dataclass(frozen=True)
class PatchMeta:
    """A field's patch strategies ("merge", "replace", "retainKeys") and, for a list of objects, its merge key."""

    strategies: tuple[str, ...] = ()
    merge_key: str = ""


NO_META = PatchMeta()


class PatchSchema:
    """One node of a kind's schema: a struct's fields, a map's values, or nothing known (lists atomic, maps merged)."""

    __slots__ = ("_fields", "_items", "_schema")

    def __init__(self, schema: dict[str, Any] | None) -> None:
        self._schema = schema or {}
        self._fields: dict[str, tuple[PatchSchema, PatchMeta]] = {}
        self._items: dict[str, tuple[PatchSchema, PatchMeta]] = {}

    @property
    def name(self) -> str:
        """What Go calls the node's kind, for kube's "cannot merge lists without merge key for …"."""
        return "map" if "additionalProperties" in self._schema else "struct"

    def for_struct(self, key: str) -> tuple[PatchSchema, PatchMeta]:
        """The schema of field `key` and its patch metadata (a map's values have none)."""
        found = self._fields.get(key)
        if found is None:
            found = self._fields[key] = self._lookup(key)
        return found

    def for_slice(self, key: str) -> tuple[PatchSchema, PatchMeta]:
        """The schema of list `key`'s items and the list's patch metadata."""
        found = self._items.get(key)
        if found is None:
            field, meta = self.for_struct(key)
            # A field that is not an array (Go's pointer to a struct) stands for its own items.
            items = _node(field._schema["items"]) if "items" in field._schema else field
            found = self._items[key] = (items, meta)
        return found

    def _lookup(self, key: str) -> tuple[PatchSchema, PatchMeta]:
        values = self._schema.get("additionalProperties")
        if isinstance(values, dict):
            return _node(values), NO_META
        field = (self._schema.get("properties") or {}).get(key)
        if not isinstance(field, dict):
            # A field kube's types lack: nothing to merge by, as for a custom resource's JSON merge.
            return UNKNOWN, NO_META
        strategy = str(field.get("x-kubernetes-patch-strategy") or "")
        meta = PatchMeta(
            tuple(s for s in strategy.split(",") if s), str(field.get("x-kubernetes-patch-merge-key") or "")
        )
        return _node(field), meta


UNKNOWN = PatchSchema(None)


def _node(schema: Any) -> PatchSchema:
    if not isinstance(schema, dict):
        return UNKNOWN
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        return _definition(ref[len(_REF_PREFIX) :])
    return PatchSchema(schema)


@cache
def _definition(name: str) -> PatchSchema:
    return PatchSchema(builtin_openapi.definitions().get(name))


def schema_for(api_version: str, kind: str) -> PatchSchema:
    """The patch schema of a built-in kind, or UNKNOWN for a kind kube does not publish."""
    group, _, version = api_version.rpartition("/")
    name = builtin_openapi.definition_name(group, version, kind)
    return _definition(name) if name else UNKNOWN
