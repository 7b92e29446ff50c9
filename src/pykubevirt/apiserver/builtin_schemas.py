"""Built-in kinds' schemas from Kubernetes' own OpenAPI, compiled for the checks kube-apiserver's decoder makes.

The definitions are the data the `kubernetes-validate` package ships for the version /version reports (loaded once,
by builtin_openapi), never hand-written copies. kube-apiserver decodes a built-in object into its Go struct:
a value of the wrong JSON type fails the request with a 400 naming the Go struct field, and a field the struct does
not have is dropped (with a warning) or, under fieldValidation=Strict, rejected. `decode_check` reproduces both in
one walk, so it stays cheap on the writes of controllers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.go_json import go_json_value
from pykubevirt.api.json_equal import ABSENT, same_json
from pykubevirt.apiserver import builtin_openapi

_REF_PREFIX = "#/$defs/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
DELETE_OPTIONS = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}
_GO_SCALARS = {"string": "string", "number": "float64", "boolean": "bool"}


@dataclass(eq=False, slots=True)
class Node:
    """One schema node: the JSON types it takes, its Go type's name, and its fields, map values or list items."""

    types: tuple[type, ...] | None = None  # None: any JSON value
    go_type: str = ""
    struct: str = ""  # the Go struct's name when the node is a struct
    properties: dict[str, Node] | None = None
    values: Node | None = None
    items: Node | None = None
    closed: bool = False  # additionalProperties: false
    integer: bool = False
    only_strings: bool = False  # a string and nothing else (the walk skips such values without a call)
    container: bool = False  # an object or an array


@dataclass(frozen=True, slots=True)
class TypeError_:
    """A value of the wrong JSON type, as Go's json.UnmarshalTypeError reports it."""

    json_type: str
    struct: str
    path: str
    go_type: str
    keys: tuple[str | int, ...] = ()

    def message(self) -> str:
        where = f"{self.struct}.{self.path}"
        return f"json: cannot unmarshal {self.json_type} into Go struct field {where} of type {self.go_type}"


@dataclass(slots=True)
class DecodeResult:
    """What decoding an object into its Go type found: the first type error and every unknown field."""

    type_error: TypeError_ | None = None
    unknown: list[tuple[str, list[str | int]]] = field(default_factory=list)
    # Struct, map and list fields whose value is null: Go decodes them to an empty value the stored object omits
    # (a null time or string stays, as kube answers `lastProbeTime: null`).
    nulls: list[list[str | int]] = field(default_factory=list)
    # Null values of string maps (labels, a ConfigMap's data): Go decodes each to "", and kube stores that.
    empty_strings: list[list[str | int]] = field(default_factory=list)


def _go_name(definition: str) -> str:
    """`io.k8s.api.core.v1.Container` → `v1.Container`, as Go prints a type from another package."""
    parts = definition.split(".")
    return ".".join(parts[-2:])


_compiled: dict[str, Node] = {}
FIELDS_V1_DEFINITION = "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"


def definition_node(definition: str) -> Node:
    """The compiled node of a named definition (recursive definitions share nodes)."""
    node = _compiled.get(definition)
    if node is None:
        node = Node()
        _compiled[definition] = node  # before compiling: JSONSchemaProps refers to itself
        _fill(node, builtin_openapi.definitions()[definition], definition)
    return node


def _compile(schema: dict[str, Any]) -> Node:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        return definition_node(ref[len(_REF_PREFIX) :])
    node = Node()
    _fill(node, schema, "")
    return node


def _fill(node: Node, schema: dict[str, Any], definition: str) -> None:
    variants = schema.get("oneOf")
    if variants:
        names = {t for v in variants for t in _type_names(v)}
    else:
        names = set(_type_names(schema))
        if not names and ("properties" in schema or "additionalProperties" in schema):
            names = {"object"}
    if names:
        node.types = tuple(dict.fromkeys(t for n in sorted(names) for t in _PY_TYPES[n]))
        if definition == FIELDS_V1_DEFINITION:
            node.types += (bytes,)  # stored field sets are kept as their JSON text (fields_v1.py)
        node.integer = names == {"integer"}
        node.only_strings = names == {"string"}
        node.container = bool(names & {"object", "array"})
    properties = schema.get("properties")
    if isinstance(properties, dict):
        node.properties = {k: _compile(v) for k, v in properties.items()}
        node.struct = definition.rsplit(".", 1)[-1] if definition else ""
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        node.values = _compile(additional)
    # Go structs are closed: a field they do not have is unknown (what the package's `-strict` variant spells out).
    node.closed = node.properties is not None and (additional is None or additional is False)
    items = schema.get("items")
    if isinstance(items, dict):
        node.items = _compile(items)
    node.go_type = _go_type(schema, names, node, definition)


def _type_names(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type")
    listed = declared if isinstance(declared, list) else [declared] if declared else []
    return [t for t in listed if t in _PY_TYPES]


def _go_type(schema: dict[str, Any], names: set[str], node: Node, definition: str) -> str:
    if definition:
        return _go_name(definition)
    if names == {"integer"}:
        return str(schema.get("format") or "int")
    if len(names) == 1 and (name := next(iter(names))) in _GO_SCALARS:
        return _GO_SCALARS[name]
    if node.items is not None:
        return "[]" + node.items.go_type
    if node.values is not None:
        return "map[string]" + node.values.go_type
    return "interface {}"


def kind_node(group: str, version: str, kind: str) -> Node | None:
    """The compiled schema of a built-in kind, None when Kubernetes' OpenAPI has none."""
    definition = builtin_openapi.definition_name(group, version, kind)
    return definition_node(definition) if definition else None


def decode_check(value: Any, node: Node, *, struct: str = "", checked: Any = ABSENT) -> DecodeResult:
    """Type errors and unknown fields of `value` decoded as `node` (kube's JSON decoding into the Go struct).

    `checked`: a stored object that passed this check; the objects and arrays `value` has unchanged from it are not
    walked again (see api/json_equal.py).
    """
    result = DecodeResult()
    if value is not None:  # null decodes to any type's zero value
        _walk(value, node, [], struct or node.struct, result, checked)
    return result


# The way to the value being walked: (key or index, whether Go's error path names it). Paths are only rendered for
# an error or an unknown field, so the walk itself allocates nothing per field.
Stack = list[tuple[str | int, bool]]


def _walk(value: Any, node: Node, stack: Stack, struct: str, result: DecodeResult, checked: Any) -> None:
    types = node.types
    if types is not None:
        if isinstance(value, bool) and bool not in types:
            _type_error(result, "bool", struct, node, stack)
            return
        if node.integer and isinstance(value, float):
            # Go parses an integer field's number as an integer: `1.5` and `1.0` both fail.
            _type_error(result, f"number {value!r}", struct, node, stack)
            return
        if not isinstance(value, types):
            _type_error(result, go_json_value(value), struct, node, stack)
            return
    if isinstance(value, float) and not math.isfinite(value):
        _type_error(result, f"number {value!r}", struct, node, stack)
        return
    if isinstance(value, dict):
        properties = node.properties
        inner = node.struct or struct
        checked_map = checked if type(checked) is dict else None
        for key, child in value.items():
            child_node = properties.get(key) if properties is not None else None
            named = True
            if child_node is None:
                child_node = node.values
                if child_node is None:
                    if node.closed:
                        stack.append((key, True))
                        result.unknown.append((_path(stack), [k for k, _ in stack]))
                        stack.pop()
                    continue
                named = False  # Go's error context does not name map keys: the path stays the map's
            if child is None:
                if child_node.container:
                    result.nulls.append([*(k for k, _ in stack), key])
                elif not named and child_node.only_strings:
                    result.empty_strings.append([*(k for k, _ in stack), key])
                continue
            if child_node.only_strings and type(child) is str:
                continue  # most fields are strings: no call for them
            checked_child = checked_map.get(key, ABSENT) if checked_map is not None else ABSENT
            if checked_child is not ABSENT and type(child) in (dict, list) and same_json(child, checked_child):
                continue
            stack.append((key, named))
            _walk(child, child_node, stack, inner, result, checked_child)
            stack.pop()
            if result.type_error is not None:
                return
    elif isinstance(value, list) and node.items is not None:
        items = node.items
        checked_list = checked if type(checked) is list else ()
        for index, item in enumerate(value):
            if item is None or (items.only_strings and type(item) is str):
                continue
            checked_item = checked_list[index] if index < len(checked_list) else ABSENT
            if checked_item is not ABSENT and type(item) in (dict, list) and same_json(item, checked_item):
                continue
            stack.append((index, False))
            _walk(item, items, stack, struct, result, checked_item)
            stack.pop()
            if result.type_error is not None:
                return


def _path(stack: Stack) -> str:
    return ".".join(str(key) for key, named in stack if named)


def _type_error(result: DecodeResult, json_type: str, struct: str, node: Node, stack: Stack) -> None:
    if result.type_error is None:
        keys = tuple(k for k, _ in stack)
        result.type_error = TypeError_(json_type, struct, _path(stack), node.go_type, keys)


def unknown_path(keys: list[str | int]) -> str:
    """`spec.containers[0].foo`, as the strict decoder names an unknown field."""
    rendered = ""
    for key in keys:
        rendered += f"[{key}]" if isinstance(key, int) else (f".{key}" if rendered else key)
    return rendered


def without_fields(value: Any, paths: list[list[str | int]] | list[tuple[str | int, ...]]) -> Any:
    """A copy of `value` without the fields at `paths` (copying only the containers on the way to them)."""
    for keys in paths:
        value = _without(value, keys)
    return value


def with_empty_strings(value: Any, paths: list[list[str | int]]) -> Any:
    """A copy of `value` with "" at each of `paths` (map keys that exist; only the containers on the way copied)."""
    for keys in paths:
        value = _set_empty(value, keys)
    return value


def _set_empty(value: Any, keys: list[str | int]) -> Any:
    head, rest = keys[0], keys[1:]
    if isinstance(value, dict) and isinstance(head, str) and head in value:
        return {**value, head: _set_empty(value[head], rest) if rest else ""}
    if isinstance(value, list) and isinstance(head, int) and head < len(value) and rest:
        copied = list(value)
        copied[head] = _set_empty(value[head], rest)
        return copied
    return value


def _without(value: Any, keys: list[str | int] | tuple[str | int, ...]) -> Any:
    if not keys:
        return value
    head, rest = keys[0], keys[1:]
    if isinstance(value, dict) and isinstance(head, str) and head in value:
        copied = dict(value)
        if rest:
            copied[head] = _without(value[head], rest)
        else:
            del copied[head]
        return copied
    if isinstance(value, list) and isinstance(head, int) and head < len(value) and rest:
        copied_list = list(value)
        copied_list[head] = _without(value[head], rest)
        return copied_list
    return value


_REQUEST_KINDS = {
    "DeleteOptions": DELETE_OPTIONS,
    "Eviction": "io.k8s.api.policy.v1.Eviction",
    "Binding": "io.k8s.api.core.v1.Binding",
}


def typed_request_body(body: Any, *, kind: str = "DeleteOptions", version: str = "v1") -> dict[str, Any] | None:
    """A DELETE, eviction or binding body decoded as kube does: None when absent, 400 for a field of the wrong type."""
    if body is None:
        return None
    node = definition_node(_REQUEST_KINDS[kind])
    problem = (
        f"json: cannot unmarshal {go_json_value(body)} into Go value of type v1.{kind}"
        if not isinstance(body, dict)
        else None
    )
    if problem is None:
        error = decode_check(body, node).type_error
        problem = error.message() if error is not None else None
    if problem is not None:
        raise errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}')
    result: dict[str, Any] = body
    return result
