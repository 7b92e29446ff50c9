"""Sets of field paths in managedFields' `fieldsV1` form, with structured-merge-diff's set algebra.

A set is a dict from path elements (`f:name`, `k:{"name":"a"}`, `v:"x"`, `i:0`) to the set below that element. An
element whose value is `{}` is a member (a leaf); a non-empty value holds the children, plus `"."` when the element
itself is a member too. Sets are never changed in place: the operations copy only the dicts on the paths they change,
so the managedFields of a stored object can be shared with the sets derived from them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson

FieldSet = dict[str, Any]

MEMBER = "."


def is_member(node: FieldSet) -> bool:
    """Whether the element a node hangs from is itself in the set."""
    return not node or MEMBER in node


def make_node(member: bool, children: FieldSet | None) -> FieldSet | None:
    """The node of an element from its membership and children; None when it holds nothing."""
    if children:
        return {MEMBER: {}, **children} if member and MEMBER not in children else children
    return {} if member else None


def _normalized(node: FieldSet) -> FieldSet | None:
    if not node:
        return None
    if len(node) == 1 and MEMBER in node:
        return {}
    return node


def union(a: FieldSet, b: FieldSet) -> FieldSet:
    if not b or a is b:
        return a
    if not a:
        return b
    out: FieldSet | None = None
    for key, b_node in b.items():
        a_node = a.get(key)
        if a_node is None:
            merged = b_node
        elif a_node is b_node or key == MEMBER:
            continue
        else:
            merged = _union_node(a_node, b_node)
            if merged is a_node:
                continue
        if out is None:
            out = dict(a)
        out[key] = merged
    return a if out is None else out


def _union_node(a_node: FieldSet, b_node: FieldSet) -> FieldSet:
    if not a_node:
        return b_node if is_member(b_node) else {MEMBER: {}, **b_node}
    if not b_node:
        return a_node if MEMBER in a_node else {MEMBER: {}, **a_node}
    return union(a_node, b_node)


def intersection(a: FieldSet, b: FieldSet) -> FieldSet:
    if not a or not b:
        return {}
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    out: FieldSet = {}
    for key, s_node in small.items():
        l_node = large.get(key)
        if l_node is None:
            continue
        if key == MEMBER:
            out[key] = {}
            continue
        node = _intersection_node(s_node, l_node)
        if node is not None:
            out[key] = node
    return out


def _intersection_node(x: FieldSet, y: FieldSet) -> FieldSet | None:
    if not x or not y:
        return {} if is_member(x) and is_member(y) else None
    return _normalized(intersection(x, y))


def difference(a: FieldSet, b: FieldSet) -> FieldSet:
    """a − b as structured-merge-diff's Set.Difference: a member of b does not take a's children with it."""
    if not a or not b:
        return a
    out: FieldSet | None = None
    for key, b_node in b.items():
        a_node = a.get(key)
        if a_node is None:
            continue
        remaining = None if key == MEMBER else _difference_node(a_node, b_node)
        if remaining is a_node:
            continue
        if out is None:
            out = dict(a)
        if remaining is None:
            del out[key]
        else:
            out[key] = remaining
    return a if out is None else out


def _difference_node(a_node: FieldSet, b_node: FieldSet) -> FieldSet | None:
    if not b_node:
        if not a_node:
            return None
        if MEMBER not in a_node:
            return a_node
        return {k: v for k, v in a_node.items() if k != MEMBER} or None
    if not a_node:
        return None if MEMBER in b_node else a_node
    remaining = difference(a_node, b_node)
    return a_node if remaining is a_node else _normalized(remaining)


def recursive_difference(a: FieldSet, b: FieldSet) -> FieldSet:
    """a − b where a member of b removes everything below it too (how ignored fields are filtered out)."""
    if not a or not b:
        return a
    out: FieldSet | None = None
    for key, b_node in b.items():
        a_node = a.get(key)
        if a_node is None or key == MEMBER:
            continue
        if is_member(b_node):
            remaining = None
        elif not a_node:
            continue
        else:
            inner = recursive_difference(a_node, b_node)
            if inner is a_node:
                continue
            remaining = _normalized(inner)
        if out is None:
            out = dict(a)
        if remaining is None:
            del out[key]
        else:
            out[key] = remaining
    return a if out is None else out


def has_path(fields: FieldSet, path: list[str]) -> bool:
    """Whether a path (a list of path elements) is a member."""
    node = fields
    for element in path:
        child = node.get(element)
        if child is None:
            return False
        node = child
    return is_member(node)


def paths(fields: FieldSet) -> Iterator[list[str]]:
    """The member paths, each level's members before its children, in structured-merge-diff's order."""
    yield from _paths(fields, [])


def _paths(fields: FieldSet, prefix: list[str]) -> Iterator[list[str]]:
    ordered = sorted((k for k in fields if k != MEMBER), key=element_order)
    for key in ordered:
        if is_member(fields[key]):
            yield [*prefix, key]
    for key in ordered:
        node = fields[key]
        if node:
            yield from _paths(node, [*prefix, key])


_KIND_ORDER = {"f": 0, "k": 1, "v": 2, "i": 3}


def element_order(element: str) -> tuple[int, Any]:
    """Field names, then keys, then values, then indexes, as structured-merge-diff orders path elements."""
    kind = _KIND_ORDER.get(element[:1], 4)
    if kind == 3:
        return kind, int(element[2:])
    return kind, element[2:]


def field_element(name: str) -> str:
    return "f:" + name


def key_element(key: dict[str, Any]) -> str:
    """`k:{"containerPort":80,"protocol":"TCP"}`: the key fields sorted by name, as compact JSON."""
    if all(type(v) in _PLAIN for v in key.values()):
        return "k:" + _plain_json(key)
    return "k:" + json.dumps(dict(sorted(key.items())), separators=(",", ":"), ensure_ascii=False)


def value_element(value: Any) -> str:
    return "v:" + (_plain_json(value) if type(value) in _PLAIN else _sorted_json(value))


# Values orjson writes as the json module does (floats differ: `1e16` against `1e+16`), so elements keep their text.
_PLAIN = (str, int, bool, type(None))


def _plain_json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # integers past 64 bits, lone surrogates: the json module's text, as before
        return _sorted_json(value)


def _sorted_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def path_string(path: list[str]) -> str:
    """A path as structured-merge-diff prints it: `.spec.containers[name="a"].image`, `.finalizers[="x"]`."""
    return "".join(_element_string(element) for element in path)


def _element_string(element: str) -> str:
    kind, text = element[:1], element[2:]
    if kind == "f":
        return "." + text
    if kind == "k":
        key = json.loads(text)
        return "[" + ",".join(f"{name}={_value_string(value)}" for name, value in key.items()) + "]"
    if kind == "v":
        return f"[={_value_string(json.loads(text))}]"
    return f"[{text}]"


def _value_string(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
