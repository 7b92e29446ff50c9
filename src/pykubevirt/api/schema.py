"""Building blocks for the API model: each returns a structural OpenAPI v3 schema node as a plain dict.

The model is written with these helpers and *is* the schema: CRDs, OpenAPI documents, pruning, strict field
validation and `kubectl explain` all read the same nodes. Every node is typed or explicitly marked
`x-kubernetes-preserve-unknown-fields` / `x-kubernetes-int-or-string`, so the output is structural by construction.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

Schema = dict[str, Any]

# apimachinery's quantity pattern, as kube-apiserver publishes it for resource.Quantity.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _node(kind: str, description: str, extra: Mapping[str, Any] | None = None) -> Schema:
    node: Schema = {"type": kind}
    if description:
        node["description"] = description
    if extra:
        node.update({k: v for k, v in extra.items() if v is not None})
    return node


def string(
    description: str = "",
    *,
    enum: Iterable[str] | None = None,
    format: str | None = None,
    pattern: str | None = None,
    max_length: int | None = None,
    default: str | None = None,
) -> Schema:
    return _node(
        "string",
        description,
        {
            "enum": list(enum) if enum is not None else None,
            "format": format,
            "pattern": pattern,
            "maxLength": max_length,
            "default": default,
        },
    )


def integer(
    description: str = "",
    *,
    format: str = "int32",
    minimum: int | None = None,
    maximum: int | None = None,
    default: int | None = None,
) -> Schema:
    return _node("integer", description, {"format": format, "minimum": minimum, "maximum": maximum, "default": default})


def int64(description: str = "", *, minimum: int | None = None) -> Schema:
    return integer(description, format="int64", minimum=minimum)


def number(description: str = "") -> Schema:
    return _node("number", description)


def boolean(description: str = "", *, default: bool | None = None) -> Schema:
    return _node("boolean", description, {"default": default})


def timestamp(description: str = "") -> Schema:
    """An RFC 3339 time (metav1.Time)."""
    return string(description, format="date-time")


def int_or_string(description: str = "") -> Schema:
    node: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if description:
        node["description"] = description
    return node


def quantity(description: str = "") -> Schema:
    """A resource.Quantity: `128Mi`, `1.5Gi`, `500m` or a plain number."""
    node = int_or_string(description)
    node["pattern"] = QUANTITY_PATTERN
    return node


def obj(
    properties: Mapping[str, Schema] | None = None,
    description: str = "",
    *,
    required: Iterable[str] = (),
    preserve_unknown: bool = False,
) -> Schema:
    """An object with known fields; an empty `properties` means the object takes no fields (`bridge: {}`)."""
    node = _node("object", description)
    if properties:
        node["properties"] = {name: copy.deepcopy(schema) for name, schema in properties.items()}
    required = list(required)
    if required:
        node["required"] = required
    if preserve_unknown:
        node["x-kubernetes-preserve-unknown-fields"] = True
    return node


def free_form(description: str = "") -> Schema:
    """An object whose content is kept as given and not checked (used for Kubernetes core blocks we pass through)."""
    return obj(description=description, preserve_unknown=True)


def array(
    items: Schema,
    description: str = "",
    *,
    list_type: str | None = None,
    list_map_keys: Iterable[str] | None = None,
    max_items: int | None = None,
) -> Schema:
    node = _node("array", description, {"maxItems": max_items})
    node["items"] = copy.deepcopy(items)
    if list_type:
        node["x-kubernetes-list-type"] = list_type
    if list_map_keys:
        node["x-kubernetes-list-map-keys"] = list(list_map_keys)
    return node


def map_of(values: Schema, description: str = "") -> Schema:
    node = _node("object", description)
    node["additionalProperties"] = copy.deepcopy(values)
    return node


def string_map(description: str = "") -> Schema:
    return map_of(string(), description)


def describe(schema: Schema, description: str) -> Schema:
    """A copy of `schema` carrying `description` (for reused nodes documented differently in each place)."""
    node = copy.deepcopy(schema)
    node["description"] = description
    return node


def extend(schema: Schema, properties: Mapping[str, Schema], *, required: Iterable[str] = ()) -> Schema:
    """A copy of an object node with more fields."""
    node = copy.deepcopy(schema)
    node.setdefault("properties", {}).update(copy.deepcopy(dict(properties)))
    extra_required = list(required)
    if extra_required:
        node["required"] = [*node.get("required", []), *extra_required]
    return node


def embedded_metadata(description: str = "") -> Schema:
    """`metadata` of an embedded template: kept as written, as KubeVirt's CRDs do."""
    return free_form(description or "Standard object's metadata for the embedded object.")


def condition(description: str = "") -> Schema:
    """A status condition as KubeVirt writes them."""
    return obj(
        {
            "type": string(),
            "status": string(),
            "lastProbeTime": timestamp(),
            "lastTransitionTime": timestamp(),
            "reason": string(),
            "message": string(),
        },
        description,
        required=["type", "status"],
    )


def label_selector(description: str = "") -> Schema:
    requirement = obj(
        {"key": string(), "operator": string(), "values": array(string(), list_type="atomic")},
        required=["key", "operator"],
    )
    return obj({"matchExpressions": array(requirement, list_type="atomic"), "matchLabels": string_map()}, description)


def resource_requirements(description: str = "") -> Schema:
    return obj(
        {"limits": map_of(quantity()), "requests": map_of(quantity())},
        description,
    )
