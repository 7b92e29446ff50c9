"""Each kind's field topology for server-side apply: structs, granular or atomic maps, and atomic, set or map lists.

Built-in kinds take it from Kubernetes' OpenAPI (the definitions the `kubernetes-validate` package ships), custom
resources from their structural schema, with `metadata` always ObjectMeta, as kube-apiserver's type converters do.
Nodes compile lazily, so a write only pays for the paths it touches.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.apiserver.builtin_openapi import definition_name, definitions
from pykubevirt.apiserver.resources import Resource

_REF_PREFIX = "#/$defs/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

# List-map key fields kube's OpenAPI defaults (`+default=`) but the shipped JSON schemas leave out.
_KEY_DEFAULTS = {
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
}

SCALAR = "scalar"
MAP = "map"
LIST = "list"
DEDUCED = "deduced"


class FieldType:
    """One node of a kind's type: what a value there is and how its parts are owned."""

    __slots__ = (
        "_elem",
        "_elem_schema",
        "_fields",
        "_properties",
        "associative",
        "atomic",
        "key_defaults",
        "keys",
        "kind",
    )

    def __init__(self, kind: str, *, atomic: bool = False) -> None:
        self.kind = kind
        self.atomic = atomic
        self.associative = False
        self.keys: tuple[str, ...] = ()
        self.key_defaults: dict[str, Any] = {}
        self._properties: dict[str, Any] = {}
        self._fields: dict[str, FieldType] = {}
        self._elem_schema: Any = None
        self._elem: FieldType | None = None

    def declares(self, name: str) -> bool:
        """Whether a map key is a declared struct field (map entries and unknown fields are not)."""
        return name in self._properties

    def field(self, name: str) -> FieldType:
        """The type of a struct field or map value."""
        found = self._fields.get(name)
        if found is not None:
            return found
        schema = self._properties.get(name)
        if schema is None:
            return self.element()
        found = self._fields[name] = compile_schema(schema)
        return found

    def element(self) -> FieldType:
        """The type of list items, of map values and of a struct's undeclared fields."""
        if self._elem is None:
            self._elem = compile_schema(self._elem_schema) if self._elem_schema is not None else DEDUCED_TYPE
        return self._elem

    def resolve(self, value: Any) -> FieldType:
        """This type, or for an untyped node the type its value implies (maps granular, lists atomic)."""
        if self.kind != DEDUCED:
            return self
        if isinstance(value, dict):
            return _DEDUCED_MAP
        if isinstance(value, list):
            return _DEDUCED_LIST
        return _SCALAR_TYPE


DEDUCED_TYPE = FieldType(DEDUCED)
_SCALAR_TYPE = FieldType(SCALAR)
_DEDUCED_MAP = FieldType(MAP)
_DEDUCED_LIST = FieldType(LIST, atomic=True)


_compiled_definitions: dict[str, FieldType] = {}


def _definition(name: str) -> FieldType:
    found = _compiled_definitions.get(name)
    if found is None:
        # Registered before it is filled: definitions refer to themselves (JSONSchemaProps).
        found = _compiled_definitions[name] = FieldType(DEDUCED)
        _fill(found, definitions().get(name) or {})
    return found


def compile_schema(schema: Any) -> FieldType:
    """The type a schema node describes (a `$ref` to kube's definitions is shared, not recompiled)."""
    if not isinstance(schema, dict):
        return DEDUCED_TYPE
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        return _definition(ref[len(_REF_PREFIX) :])
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "properties" not in schema and "type" not in schema:
        return compile_schema(all_of[0])
    node = FieldType(DEDUCED)
    _fill(node, schema)
    return node


def _type_names(schema: dict[str, Any]) -> set[str]:
    declared = schema.get("type")
    names = set(declared) if isinstance(declared, list) else {declared} if isinstance(declared, str) else set()
    names.discard("null")
    return names


def _fill(node: FieldType, schema: dict[str, Any]) -> None:
    names = _type_names(schema)
    if schema.get("x-kubernetes-int-or-string") or "oneOf" in schema or "anyOf" in schema:
        node.kind = SCALAR
    elif "array" in names or ("items" in schema and not names):
        _fill_list(node, schema)
    elif "object" in names or "properties" in schema or "additionalProperties" in schema:
        _fill_map(node, schema)
    elif names:
        node.kind = SCALAR
    else:
        node.kind = DEDUCED


def _fill_list(node: FieldType, schema: dict[str, Any]) -> None:
    node.kind = LIST
    node._elem_schema = schema.get("items")
    list_type = schema.get("x-kubernetes-list-type")
    strategy = str(schema.get("x-kubernetes-patch-strategy") or "")
    if list_type == "map":
        node.associative = True
        node.keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
    elif list_type == "set":
        node.associative = True
    elif list_type is None and strategy in ("merge", "merge,retainKeys"):
        # Built-in lists without a list type follow their strategic merge key, as kube-openapi converts them.
        node.associative = True
        merge_key = schema.get("x-kubernetes-patch-merge-key")
        node.keys = (str(merge_key),) if merge_key else ()
    node.atomic = not node.associative
    if node.keys:
        item = schema.get("items")
        item_name = _ref_name(item)
        item_schema = definitions().get(item_name, {}) if item_name else item if isinstance(item, dict) else {}
        properties = item_schema.get("properties") or {}
        for key in node.keys:
            default = (properties.get(key) or {}).get("default", _KEY_DEFAULTS.get((item_name, key)))
            if default is not None:
                node.key_defaults[key] = default


def _ref_name(schema: Any) -> str:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            return ref[len(_REF_PREFIX) :]
    return ""


def _fill_map(node: FieldType, schema: dict[str, Any]) -> None:
    node.kind = MAP
    node.atomic = schema.get("x-kubernetes-map-type") == "atomic"
    properties = dict(schema.get("properties") or {})
    if schema.get("x-kubernetes-embedded-resource"):
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties["metadata"] = {"$ref": _REF_PREFIX + OBJECT_META}
    node._properties = properties
    additional = schema.get("additionalProperties")
    # Fields nobody declared (preserved unknown fields, RawExtension's content) are untyped and granular.
    node._elem_schema = additional if isinstance(additional, dict) else None


_builtin_roots: dict[tuple[str, str, str], FieldType] = {}
_custom_roots: dict[int, tuple[Any, FieldType]] = {}


def kind_type(resource: Resource) -> FieldType:
    """The root type of a resource's objects."""
    if resource.builtin:
        key = (resource.group, resource.version, resource.kind)
        root = _builtin_roots.get(key)
        if root is None:
            definition = definition_name(*key)
            schema = {"$ref": _REF_PREFIX + definition} if definition else {"type": "object"}
            root = _builtin_roots[key] = _root(schema)
        return root
    cached = _custom_roots.get(id(resource.schema))
    if cached is not None and cached[0] is resource.schema:
        return cached[1]
    root = _root(resource.schema or {"type": "object"})
    _custom_roots[id(resource.schema)] = (resource.schema, root)
    return root


def _root(schema: dict[str, Any]) -> FieldType:
    """A kind's schema with apiVersion, kind and ObjectMeta declared, whatever the schema says about them."""
    name = _ref_name(schema)
    body = definitions().get(name, {}) if name else schema
    properties = dict(body.get("properties") or {})
    properties.setdefault("apiVersion", {"type": "string"})
    properties.setdefault("kind", {"type": "string"})
    properties["metadata"] = {"$ref": _REF_PREFIX + OBJECT_META}
    root = FieldType(MAP)
    root._properties = properties
    additional = body.get("additionalProperties")
    root._elem_schema = additional if isinstance(additional, dict) else None
    return root
