"""structured-merge-diff's walks over an object and its type: field sets, comparison, merge and removal.

Each follows sigs.k8s.io/structured-merge-diff's typed package: maps are granular unless atomic, lists are atomic
unless they are sets or keyed maps, and a list whose items lack their keys (or repeat them) is handled as atomic.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api.json_equal import ABSENT
from pykubevirt.apiserver.field_sets import (
    MEMBER,
    FieldSet,
    is_member,
    key_element,
    make_node,
    value_element,
)
from pykubevirt.apiserver.field_types import LIST, MAP, FieldType

# ------------------------------------------------------------------------------------------------- path elements


def item_elements(items: list[Any], t: FieldType) -> list[str] | None:
    """The path element of each item of an associative list; None when one has no key or two share one."""
    elements = []
    for item in items:
        element = _item_element(item, t)
        if element is None:
            return None
        elements.append(element)
    if len(set(elements)) != len(elements):
        return None
    return elements


def _item_element(item: Any, t: FieldType) -> str | None:
    if not t.keys:
        return value_element(item)
    if not isinstance(item, dict):
        return None
    key = {}
    for name in t.keys:
        value = item.get(name)
        if value is None:
            value = t.key_defaults.get(name)
            if value is None:
                return None
        if isinstance(value, dict | list):
            return None
        key[name] = value
    return key_element(key)


def _granular_map(value: Any, t: FieldType) -> bool:
    return t.kind == MAP and not t.atomic and isinstance(value, dict)


def _granular_list(value: Any, t: FieldType) -> bool:
    return t.kind == LIST and t.associative and isinstance(value, list)


# ------------------------------------------------------------------------------------------------- field sets


def field_set(obj: dict[str, Any], t: FieldType) -> FieldSet:
    """The fields an applied configuration sets (structured-merge-diff's ToFieldSet)."""
    return _field_set(obj, t)[1] or {}


def _field_set(value: Any, t: FieldType) -> tuple[bool, FieldSet | None]:
    """Whether the value's own path is a member, and the set below it."""
    if value is None:
        return True, None
    t = t.resolve(value)
    if _granular_map(value, t):
        children: FieldSet = {}
        for key, child in value.items():
            member, below = _field_set(child, t.field(key))
            if child is None or child == {} or not t.declares(key):
                member = True
            node = make_node(member, below)
            if node is not None:
                children["f:" + key] = node
        return False, children
    if _granular_list(value, t):
        elements = item_elements(value, t)
        if elements is not None:
            item_type = t.element()
            items: FieldSet = {}
            for element, item in zip(elements, value, strict=True):
                items[element] = make_node(True, _field_set(item, item_type)[1])
            return False, items
    # Scalars, atomic lists and maps, and keyed lists whose keys are missing are owned as a whole.
    return True, None


def all_fields(value: Any, t: FieldType) -> FieldSet:
    """Every path in a value, each a member: what adding or removing the value as a whole changes."""
    if not value:
        return {}
    if isinstance(value, dict):
        t = t.resolve(value)
        if not _granular_map(value, t):
            return {}
        children: FieldSet = {MEMBER: {}}
        field = t.field
        for key, child in value.items():
            # Leaves are most of an object: their empty set is made here rather than in a call.
            children["f:" + key] = all_fields(child, field(key)) if child and isinstance(child, dict | list) else {}
        return children
    if isinstance(value, list):
        t = t.resolve(value)
        elements = item_elements(value, t) if _granular_list(value, t) else None
        if elements is not None:
            item_type = t.element()
            items: FieldSet = {MEMBER: {}}
            for element, item in zip(elements, value, strict=True):
                items[element] = all_fields(item, item_type)
            return items
    # Scalars, atomic values and keyed lists whose keys are missing have no path below them.
    return {}


# ------------------------------------------------------------------------------------------------- comparison

Nodes = tuple[FieldSet | None, FieldSet | None, FieldSet | None]
_UNCHANGED: Nodes = (None, None, None)


def compare(old: dict[str, Any], new: dict[str, Any], t: FieldType) -> tuple[FieldSet, FieldSet, FieldSet]:
    """The fields added, modified and removed from `old` to `new`; equal subtrees are skipped without a walk."""
    added, modified, removed = _compare_maps(old, new, t)
    return added or {}, modified or {}, removed or {}


def _same(old: Any, new: Any) -> bool:
    return old is new or (type(old) is type(new) and old == new)


def _compare(old: Any, new: Any, t: FieldType) -> Nodes:
    if old is ABSENT:
        return all_fields(new, t), None, None
    if new is ABSENT:
        return None, None, all_fields(old, t)
    if _same(old, new):
        return _UNCHANGED
    t_new = t.resolve(new)
    if t.resolve(old) is t_new:
        if _granular_map(old, t_new) and _granular_map(new, t_new) and (old or new):
            return _compare_maps(old, new, t_new)
        if _granular_list(old, t_new) and _granular_list(new, t_new) and (old or new):
            old_elements = item_elements(old, t_new)
            new_elements = item_elements(new, t_new)
            if old_elements is not None and new_elements is not None:
                return _compare_items(
                    dict(zip(old_elements, old, strict=True)), dict(zip(new_elements, new, strict=True)), t_new
                )
    return None, {}, None


def _compare_maps(old: dict[str, Any], new: dict[str, Any], t: FieldType) -> Nodes:
    added: FieldSet = {}
    modified: FieldSet = {}
    removed: FieldSet = {}
    for key, new_value in new.items():
        old_value = old.get(key, ABSENT)
        if old_value is not ABSENT and _same(old_value, new_value):
            continue
        _collect("f:" + key, _compare(old_value, new_value, t.field(key)), added, modified, removed)
    for key, old_value in old.items():
        if key not in new:
            removed["f:" + key] = all_fields(old_value, t.field(key))
    return added or None, modified or None, removed or None


def _compare_items(old: dict[str, Any], new: dict[str, Any], t: FieldType) -> Nodes:
    item_type = t.element()
    added: FieldSet = {}
    modified: FieldSet = {}
    removed: FieldSet = {}
    for element, new_item in new.items():
        old_item = old.get(element, ABSENT)
        if old_item is not ABSENT and _same(old_item, new_item):
            continue
        _collect(element, _compare(old_item, new_item, item_type), added, modified, removed)
    for element, old_item in old.items():
        if element not in new:
            removed[element] = all_fields(old_item, item_type)
    return added or None, modified or None, removed or None


def _collect(element: str, nodes: Nodes, added: FieldSet, modified: FieldSet, removed: FieldSet) -> None:
    a, m, r = nodes
    if a is not None:
        added[element] = a
    if m is not None:
        modified[element] = m
    if r is not None:
        removed[element] = r


# ------------------------------------------------------------------------------------------------- merge


def merge(live: Any, config: Any, t: FieldType) -> Any:
    """The live object with an applied configuration merged in (None: the configuration removes the field).

    Keyed list items keep the live order, with the configuration's items placed as structured-merge-diff places them.
    """
    if config is ABSENT:
        return live
    if config is None or live is ABSENT or live is None:
        return config
    t = t.resolve(config)
    if t.resolve(live) is not t:
        return config
    if _granular_map(live, t) and _granular_map(config, t) and (live or config):
        out = dict(live)
        for key, value in config.items():
            merged = merge(live.get(key, ABSENT), value, t.field(key))
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        return out
    if _granular_list(live, t) and _granular_list(config, t) and (live or config):
        merged_list = _merge_items(live, config, t)
        if merged_list is not None:
            return merged_list
    return config


def _merge_items(live: list[Any], config: list[Any], t: FieldType) -> list[Any] | None:
    """A port of mergingWalker.visitListItems: live items in place, configured ones merged where they belong."""
    rhs = item_elements(config, t)
    lhs = [_item_element(item, t) for item in live]
    if rhs is None or None in lhs:
        return None
    lhs_elements: list[str] = [e for e in lhs if e is not None]
    item_type = t.element()
    observed_rhs = dict(zip(rhs, config, strict=True))
    observed_lhs: dict[str, Any] = {}
    for element, item in zip(lhs_elements, live, strict=True):
        # A key the live list repeats merges as if it were absent there.
        observed_lhs[element] = item if element not in observed_lhs else ABSENT
    shared = [element for element in rhs if element in observed_lhs]
    shared_at = 0
    next_shared = shared[0] if shared else None
    merged_rhs: set[str] = set()
    out: list[Any] = []

    def add(left: Any, right: Any) -> None:
        value = merge(left, right, item_type)
        if value is not None:
            out.append(value)

    li = ri = 0
    while li < len(lhs_elements) or ri < len(rhs):
        if li < len(lhs_elements) and ri < len(rhs):
            element = lhs_elements[li]
            if element == rhs[ri]:
                merged_rhs.add(element)
                add(observed_lhs[element], observed_rhs[element])
                li += 1
                ri += 1
                shared_at += 1
                next_shared = shared[shared_at] if shared_at < len(shared) else None
                continue
            if element in observed_rhs and next_shared is not None and next_shared != element:
                li += 1
                continue
        if li < len(lhs_elements):
            element = lhs_elements[li]
            if element not in observed_rhs:
                add(live[li], ABSENT)
                li += 1
                continue
            if element in merged_rhs:
                li += 1
        if ri < len(rhs):
            element = rhs[ri]
            merged_rhs.add(element)
            add(observed_lhs.get(element, ABSENT), observed_rhs[element])
            ri += 1
            if next_shared is not None and next_shared == element:
                shared_at += 1
                next_shared = shared[shared_at] if shared_at < len(shared) else None
    return out


# ------------------------------------------------------------------------------------------------- removal


def remove(obj: dict[str, Any], fields: FieldSet, t: FieldType) -> dict[str, Any]:
    """The object without the members of `fields` and what lies below them (RemoveItems)."""
    result = _remove(obj, fields, t)
    return result if isinstance(result, dict) else {}


def _remove(value: Any, fields: FieldSet, t: FieldType) -> Any:
    """The value without the removed paths below it; None when removing emptied it."""
    t = t.resolve(value)
    if _granular_map(value, t):
        out = {}
        for key, child in value.items():
            node = fields.get("f:" + key)
            if node is None:
                out[key] = child
            elif not is_member(node):
                kept = _remove(child, node, t.field(key))
                if kept is not None:
                    out[key] = kept
        return out or None
    if _granular_list(value, t):
        elements = item_elements(value, t)
        if elements is None:
            return value
        item_type = t.element()
        items = []
        for element, item in zip(elements, value, strict=True):
            node = fields.get(element)
            if node is None:
                items.append(item)
            elif not is_member(node):
                kept = _remove(item, node, item_type)
                if kept is not None:
                    items.append(kept)
        return items or None
    return value


def ensure_named_fields(fields: FieldSet, t: FieldType) -> FieldSet:
    """The set with every declared struct field on a member's path a member too (EnsureNamedFieldsAreMembers)."""
    out: FieldSet | None = None
    for element, node in fields.items():
        if element == MEMBER:
            continue
        named = element.startswith("f:")
        child_type = t.field(element[2:]) if named else t.element()
        updated = ensure_named_fields(node, child_type) if node else node
        if named and t.declares(element[2:]) and not is_member(updated):
            updated = {MEMBER: {}, **updated}
        if updated is not node:
            if out is None:
                out = dict(fields)
            out[element] = updated
    return fields if out is None else out
