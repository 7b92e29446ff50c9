"""The checks every write makes before anything is stored: decoding into the kind's types, then ObjectMeta's rules.

`decode_fields` does what kube-apiserver's decoder does to a body: a built-in kind's fields must have the types of
Kubernetes' OpenAPI (else 400) and unknown fields are dropped with a warning (400 under fieldValidation=Strict); a
custom resource's metadata fields of the wrong type are dropped, as apiextensions-apiserver drops them.
`validate_metadata` is ValidateObjectMetaAccessor (422 Invalid with a cause per problem).

Objects stored by an older version may already break these rules. An update is not refused for what it did not
change (the rules ratchet, as kube's do for fields that became stricter): a malformed field the stored object already
had is dropped, and a metadata problem it already had is not reported again.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.field_hints import strict_decoding_error, unknown_field_messages
from pykubevirt.api.json_equal import ABSENT
from pykubevirt.apiserver import builtin_schemas
from pykubevirt.apiserver.object_meta_validation import (
    Cause,
    NameRule,
    dns_subdomain_name,
    invalid,
    name_rule,
    object_meta_causes,
    path_segment_name,
    required,
)
from pykubevirt.apiserver.resources import Resource

STRICT = "Strict"
WARN = "Warn"
# Bounds the repair loop of a stored object with many malformed fields.
_MAX_DROPPED_FIELDS = 64


def decode_fields(
    resource: Resource,
    obj: dict[str, Any],
    field_validation: str,
    warnings: list[str],
    *,
    old: dict[str, Any] | None = None,
    checked: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`obj` as the kind's decoder would leave it; 400 for values of the wrong type (or unknown fields, if Strict).

    `obj` is not changed; a copy is returned when something is dropped. `checked`: `old` when it passed this check
    (written by this process), so what `obj` has unchanged from it is not walked again.
    """
    if obj.get("metadata") is None:
        obj = {**obj, "metadata": {}}
    node = builtin_schemas.kind_node(resource.group, resource.version, resource.kind) if resource.builtin else None
    if node is None:
        return _without_empty_metadata(_drop_malformed_metadata(obj))
    for _ in range(_MAX_DROPPED_FIELDS):
        result = builtin_schemas.decode_check(obj, node, checked=checked if checked is not None else ABSENT)
        error = result.type_error
        if error is None:
            break
        if old is None or not _has_type_error_at(old, node, error.keys):
            raise errors.bad_request(
                f'{resource.kind} in version "{resource.version}" cannot be handled as a {resource.kind}: '
                + error.message()
            )
        obj = builtin_schemas.without_fields(obj, [error.keys])
    else:
        raise errors.bad_request(f"{resource.kind} has too many malformed fields")
    if result.nulls:
        obj = builtin_schemas.without_fields(obj, result.nulls)
    if result.empty_strings:
        obj = builtin_schemas.with_empty_strings(obj, result.empty_strings)
    if result.unknown:
        paths = [builtin_schemas.unknown_path(keys) for _, keys in result.unknown]
        if field_validation == STRICT:
            raise errors.bad_request(strict_decoding_error(resource.kind, resource.version, paths))
        if field_validation == WARN:
            warnings.extend(unknown_field_messages(paths))
        obj = builtin_schemas.without_fields(obj, [keys for _, keys in result.unknown])
    return _without_empty_metadata(obj)


# ObjectMeta's lists and maps are `omitempty`: kube's encoder leaves an empty one out, for custom resources too (their
# metadata goes through ObjectMeta).
_OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")


def _without_empty_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    if not isinstance(meta, dict) or not any(meta.get(k, True) in ({}, []) for k in _OMITTED_WHEN_EMPTY):
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k not in _OMITTED_WHEN_EMPTY or v not in ({}, [])}}


def _has_type_error_at(old: dict[str, Any], node: builtin_schemas.Node, keys: tuple[str | int, ...]) -> bool:
    value: Any = old
    for key in keys:
        if isinstance(value, dict) and isinstance(key, str) and key in value:
            value = value[key]
        elif isinstance(value, list) and isinstance(key, int) and key < len(value):
            value = value[key]
        else:
            return False
    result = builtin_schemas.decode_check(old, node)
    return result.type_error is not None and result.type_error.keys == keys


def _drop_malformed_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """apiextensions' GetObjectMeta with dropMalformedFields: each metadata field of the wrong type goes."""
    meta = obj["metadata"]
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    fields = builtin_schemas.definition_node(builtin_schemas.OBJECT_META).properties or {}
    malformed = [
        key
        for key, value in meta.items()
        if value is None or (key in fields and builtin_schemas.decode_check(value, fields[key]).type_error is not None)
    ]
    # ObjectMeta's string maps: a null value decodes to "".
    emptied = {
        key: {k: "" if v is None else v for k, v in values.items()}
        for key in ("labels", "annotations")
        if isinstance(values := meta.get(key), dict) and None in values.values()
    }
    if not malformed and not emptied:
        return obj
    return {**obj, "metadata": {**{k: v for k, v in meta.items() if k not in malformed}, **emptied}}


def metadata_causes(resource: Resource, obj: dict[str, Any]) -> list[Cause]:
    """ValidateObjectMetaAccessor with the kind's name rule (custom resources: DNS subdomain, as for CRDs' kinds)."""
    meta = obj.get("metadata") or {}
    rule: NameRule | None = name_rule(resource.group, resource.kind) if resource.builtin else dns_subdomain_name
    if rule is not None:
        return object_meta_causes(meta, rule, namespaced=resource.namespaced)
    # Kinds kube does not validate still need a name that can be a path segment.
    name = meta.get("name")
    if not name:
        return [required("metadata.name", "name or generateName is required")]
    return [invalid("metadata.name", name, m) for m in path_segment_name(str(name), False)]


# The metadata fields ValidateObjectMetaAccessor checks, but for generation (checked on its own, it changes often).
_CHECKED_METADATA = ("generateName", "name", "namespace", "labels", "annotations", "ownerReferences", "finalizers")


def _checked_metadata_unchanged(meta: dict[str, Any], old_meta: dict[str, Any]) -> bool:
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        return False
    return all(meta.get(key) == old_meta.get(key) for key in _CHECKED_METADATA)


def check_uid_unchanged(resource: Resource, new: dict[str, Any], old: dict[str, Any]) -> None:
    """422 when an update names another uid than the stored object's (a kubelet's status patch uses it as a guard).

    An update without a uid keeps the stored one, as BeforeUpdate does; a status write is checked too, since
    ResetObjectMetaForStatus leaves the uid as the client sent it.
    """
    uid = (new.get("metadata") or {}).get("uid")
    stored = old["metadata"]
    if uid and uid != stored.get("uid"):
        cause = invalid("metadata.uid", uid, "field is immutable")
        raise errors.invalid(resource.kind, resource.group, str(stored["name"]), [cause])


def validate_metadata(resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """422 Invalid when the object's metadata breaks apimachinery's rules (those `old` already broke excepted)."""
    if old is not None and _checked_metadata_unchanged(obj.get("metadata") or {}, old.get("metadata") or {}):
        # Most updates (every status write) leave these as they were: any cause would be one `old` already had.
        return
    causes = metadata_causes(resource, obj)
    if causes and old is not None:
        before = {(c["field"], c["message"]) for c in metadata_causes(resource, old)}
        causes = [c for c in causes if (c["field"], c["message"]) not in before]
    if causes:
        name = (obj.get("metadata") or {}).get("name")
        raise errors.invalid(resource.kind, resource.group, name if isinstance(name, str) else "", causes)


def check_patched_name(patched: dict[str, Any], name: str, namespace: str | None) -> None:
    """kube's checkName on a patch's result: a patch cannot rename an object or move it to another namespace."""
    meta = patched.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("name") != name:
        shown = meta.get("name") if isinstance(meta.get("name"), str) else ""
        raise errors.bad_request(f"the name of the object ({shown}) does not match the name on the URL ({name})")
    moved_to = meta.get("namespace")
    if namespace and moved_to not in (None, "", namespace):
        raise errors.bad_request(
            f"the namespace of the object ({moved_to}) does not match the namespace on the URL ({namespace})"
        )


def check_replacement_name(new: dict[str, Any], name: str, namespace: str | None) -> None:
    """A PUT's body may leave out its name and namespace, but not name others (checkName and, as on create,
    EnsureObjectNamespaceMatchesRequestNamespace)."""
    meta = new.get("metadata") or {}
    if meta.get("name") and meta["name"] != name:
        raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
    if namespace and meta.get("namespace") not in (None, "", namespace):
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
