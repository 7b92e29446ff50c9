"""The component schemas of the OpenAPI documents: kube's schema names, the meta/v1 types and each kind's schema."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver.resources import Resource

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
STATUS = f"{META}.Status"
DELETE_OPTIONS = f"{META}.DeleteOptions"
PATCH = f"{META}.Patch"

V3_REF_PREFIX = "#/components/schemas/"
V2_REF_PREFIX = "#/definitions/"

# Built-in groups keep the Go package path kube-apiserver names their schemas after.
_BUILTIN_PREFIXES = {
    "": "io.k8s.api.core",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
    "apiregistration.k8s.io": "io.k8s.kube-aggregator.pkg.apis.apiregistration",
}

_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
API_VERSION_DESCRIPTION = (
    f"APIVersion defines the versioned schema of this representation of an object. {_CONVENTIONS}#resources"
)
KIND_DESCRIPTION = (
    f"Kind is a string value representing the REST resource this object represents. {_CONVENTIONS}#types-kinds"
)
METADATA_DESCRIPTION = f"Standard object's metadata. More info: {_CONVENTIONS}#metadata"
LIST_METADATA_DESCRIPTION = f"Standard list metadata. More info: {_CONVENTIONS}#types-kinds"


def ref(name: str, prefix: str = V3_REF_PREFIX) -> Schema:
    return {"$ref": prefix + name}


def _wrapped(name: str, description: str) -> Schema:
    # OpenAPI 3.0 ignores siblings of $ref, so kube-apiserver wraps references that carry a description in allOf.
    return {"allOf": [ref(name)], "description": description}


def schema_prefix(group: str, builtin: bool) -> str:
    """`io.k8s.api.apps` for built-in groups, the reversed domain (`io.kubevirt`) for custom ones."""
    if group in _BUILTIN_PREFIXES:
        return _BUILTIN_PREFIXES[group]
    if builtin or "." not in group:
        return "io.k8s.api." + group.split(".")[0]
    return ".".join(reversed(group.split(".")))


def schema_name(group: str, version: str, kind: str, builtin: bool) -> str:
    return f"{schema_prefix(group, builtin)}.{version}.{kind}"


def resource_schema_name(resource: Resource) -> str:
    """The components.schemas name kube-apiserver gives a resource's kind (`io.kubevirt.v1.VirtualMachine`)."""
    return schema_name(resource.group, resource.version, resource.kind, resource.builtin)


def list_kind(resource: Resource) -> str:
    return str(resource.extra.get("list_kind") or f"{resource.kind}List")


def gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "kind": kind, "version": version}


_TYPES: dict[str, Schema] = {
    "string": {"type": "string"},
    "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"},
    "boolean": {"type": "boolean"},
    "time": {"type": "string", "format": "date-time"},
    "object": {"type": "object"},
    "map": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
    "strings": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "atomic"},
}


def _field(kind: str | Schema, description: str) -> Schema:
    """A property node: a named type from _TYPES, `ref:<schema>` (wrapped reference) or a node given as is."""
    if isinstance(kind, str) and kind.startswith("ref:"):
        return _wrapped(kind[4:], description)
    node = copy_json(_TYPES[kind] if isinstance(kind, str) else kind)
    node["description"] = description
    return node


def _object(description: str, fields: Iterable[tuple[str, str | Schema, str]], **extra: Any) -> Schema:
    properties = {name: _field(kind, text) for name, kind, text in fields}
    return {"type": "object", "description": description, "properties": properties, **extra}


def _array_of(name: str, **extra: Any) -> Schema:
    return {"type": "array", "items": ref(name), **extra}


def open_kind_schema(description: str, kind_gvk: dict[str, str]) -> Schema:
    return {
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": [kind_gvk],
    }


# Garbage collection follows ownerReferences; kube merges the list by uid.
_OWNER_LIST = {
    "x-kubernetes-list-map-keys": ["uid"],
    "x-kubernetes-list-type": "map",
    "x-kubernetes-patch-merge-key": "uid",
    "x-kubernetes-patch-strategy": "merge",
}
_OBJECT_META_FIELDS: tuple[tuple[str, str | Schema, str], ...] = (
    ("annotations", "map", "Unstructured key-value map that tools use to store arbitrary metadata; not queryable."),
    ("creationTimestamp", "time", "Server time when this object was created. Populated by the system. Read-only."),
    ("deletionGracePeriodSeconds", "int64", "Seconds allowed for graceful termination; set with deletionTimestamp."),
    ("deletionTimestamp", "time", "When this resource will be deleted, set when deletion is requested. Read-only."),
    ("finalizers", {**_TYPES["strings"], "x-kubernetes-list-type": "set"}, "Must be empty before deletion."),
    ("generateName", "string", "Prefix the server uses to generate a unique name when name is not set."),
    ("generation", "int64", "A sequence number of the desired state (spec changes). Read-only."),
    ("labels", "map", "Map of string keys and values to organize and select objects."),
    ("managedFields", _array_of(f"{META}.ManagedFieldsEntry"), "Which workflow manages which fields."),
    ("name", "string", "Name must be unique within a namespace. Required when creating resources. Cannot be updated."),
    ("namespace", "string", "The space within which each name must be unique. Cannot be updated."),
    ("ownerReferences", _array_of(f"{META}.OwnerReference", **_OWNER_LIST), "Objects this object depends on."),
    ("resourceVersion", "string", "Opaque version of this object, changed on every write. Read-only."),
    ("selfLink", "string", "Deprecated: selfLink is a legacy read-only field that is no longer populated."),
    ("uid", "string", "Unique in time and space value for this object. Populated by the system. Read-only."),
)


def meta_schemas() -> dict[str, Schema]:
    """The apimachinery meta/v1 schemas every document refers to."""
    owner_reference = _object(
        "OwnerReference contains enough information to let you identify an owning object.",
        (
            ("apiVersion", "string", "API version of the referent."),
            ("blockOwnerDeletion", "boolean", "If true, foreground deletion of the owner waits for this object."),
            ("controller", "boolean", "If true, this reference points to the managing controller."),
            ("kind", "string", "Kind of the referent."),
            ("name", "string", "Name of the referent."),
            ("uid", "string", "UID of the referent."),
        ),
        required=["apiVersion", "kind", "name", "uid"],
        **{"x-kubernetes-map-type": "atomic"},
    )
    managed_fields_entry = _object(
        "ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource it applies to.",
        (
            ("apiVersion", "string", "Version of the resource this field set applies to."),
            ("fieldsType", "string", "Format of the fields field; the only valid value is FieldsV1."),
            ("fieldsV1", "object", "The field set, in FieldsV1 format."),
            ("manager", "string", "Identifier of the workflow managing these fields."),
            ("operation", "string", "The type of operation which lead to this entry: Apply or Update."),
            ("subresource", "string", "The subresource used to update the object, empty for the main resource."),
            ("time", "time", "When the entry was added or last changed."),
        ),
    )
    list_meta = _object(
        "ListMeta describes metadata that synthetic resources must have, including lists.",
        (
            ("continue", "string", "Set when the list was cut by a limit: the token of the next chunk."),
            ("remainingItemCount", "int64", "The number of subsequent items not included in this response."),
            ("resourceVersion", "string", "The version of the store this list was read from."),
            ("selfLink", "string", "Deprecated: selfLink is a legacy read-only field that is no longer populated."),
        ),
    )
    status_cause = _object(
        "StatusCause provides more information about an api.Status failure.",
        (
            ("field", "string", "The field of the resource that has caused this error, as named by its JSON path."),
            ("message", "string", "A human-readable description of the cause of the error."),
            ("reason", "string", "A machine-readable description of the cause of the error."),
        ),
    )
    status_details = _object(
        "StatusDetails is a set of additional properties that MAY be set by the server.",
        (
            ("causes", _array_of(f"{META}.StatusCause"), "More details associated with the StatusReason failure."),
            ("group", "string", "The group attribute of the resource associated with the status StatusReason."),
            ("kind", "string", "The kind attribute of the resource associated with the status StatusReason."),
            ("name", "string", "The name attribute of the resource associated with the status StatusReason."),
            ("retryAfterSeconds", "int32", "If specified, the time in seconds before the operation should be retried."),
            ("uid", "string", "UID of the resource."),
        ),
    )
    status = _object(
        "Status is a return value for calls that don't return other objects.",
        (
            ("apiVersion", "string", API_VERSION_DESCRIPTION),
            ("code", "int32", "Suggested HTTP return code for this status."),
            ("details", f"ref:{META}.StatusDetails", "Extended data associated with the reason."),
            ("kind", "string", KIND_DESCRIPTION),
            ("message", "string", "A human-readable description of the status of this operation."),
            ("metadata", f"ref:{LIST_META}", LIST_METADATA_DESCRIPTION),
            ("reason", "string", "A machine-readable description of why this operation is in the Failure status."),
            ("status", "string", 'Status of the operation. One of: "Success" or "Failure".'),
        ),
        **{"x-kubernetes-group-version-kind": [gvk("", "v1", "Status")]},
    )
    preconditions = _object(
        "Preconditions must be fulfilled before an operation (update, delete, etc.) is carried out.",
        (("resourceVersion", "string", "Specifies the target ResourceVersion"), ("uid", "string", "Target UID")),
    )
    delete_options = _object(
        "DeleteOptions may be provided when deleting an API object.",
        (
            ("apiVersion", "string", API_VERSION_DESCRIPTION),
            ("dryRun", "strings", "When present, indicates that modifications should not be persisted. Valid: All."),
            ("gracePeriodSeconds", "int64", "The duration in seconds before the object should be deleted."),
            ("kind", "string", KIND_DESCRIPTION),
            ("orphanDependents", "boolean", "Deprecated: use propagationPolicy."),
            ("preconditions", f"ref:{META}.Preconditions", "Must be fulfilled before a deletion is carried out."),
            ("propagationPolicy", "string", "How dependents are garbage collected: Orphan, Background, Foreground."),
        ),
        **{"x-kubernetes-group-version-kind": [gvk("", "v1", "DeleteOptions")]},
    )
    return {
        OBJECT_META: _object("ObjectMeta is metadata that all persisted resources must have.", _OBJECT_META_FIELDS),
        LIST_META: list_meta,
        f"{META}.OwnerReference": owner_reference,
        f"{META}.ManagedFieldsEntry": managed_fields_entry,
        STATUS: status,
        f"{META}.StatusDetails": status_details,
        f"{META}.StatusCause": status_cause,
        DELETE_OPTIONS: delete_options,
        f"{META}.Preconditions": preconditions,
        PATCH: {"type": "object", "description": "Patch gives a concrete name and type to the PATCH request body."},
    }


def _embed_object_meta(node: Any) -> None:
    """Embedded resources (`x-kubernetes-embedded-resource`) get ObjectMeta for their metadata, as kube publishes."""
    if isinstance(node, dict):
        props = node.get("properties")
        if node.get("x-kubernetes-embedded-resource") and isinstance(props, dict) and "metadata" in props:
            props["metadata"] = _wrapped(OBJECT_META, METADATA_DESCRIPTION)
        for value in node.values():
            _embed_object_meta(value)
    elif isinstance(node, list):
        for value in node:
            _embed_object_meta(value)


def kind_schema(resource: Resource) -> Schema:
    """The published schema of a kind: the model's schema with the standard apiVersion/kind/metadata fields."""
    schema: Schema = copy_json(resource.schema) if resource.schema else {}
    schema.setdefault("type", "object")
    _embed_object_meta(schema)
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = _field("string", API_VERSION_DESCRIPTION)
    properties["kind"] = _field("string", KIND_DESCRIPTION)
    properties["metadata"] = _wrapped(OBJECT_META, METADATA_DESCRIPTION)
    schema["x-kubernetes-group-version-kind"] = [gvk(resource.group, resource.version, resource.kind)]
    return schema


def list_schema(resource: Resource) -> Schema:
    kind = list_kind(resource)
    return {
        "type": "object",
        "description": f"{kind} is a list of {resource.kind}",
        "required": ["items"],
        "properties": {
            "apiVersion": _field("string", API_VERSION_DESCRIPTION),
            "items": {
                "type": "array",
                "description": f"List of {resource.plural}.",
                "items": ref(resource_schema_name(resource)),
            },
            "kind": _field("string", KIND_DESCRIPTION),
            "metadata": _wrapped(LIST_META, LIST_METADATA_DESCRIPTION),
        },
        "x-kubernetes-group-version-kind": [gvk(resource.group, resource.version, kind)],
    }
