"""apimachinery's ObjectMeta rules (ValidateObjectMetaAccessor), with its field paths and message texts.

Runs on every create and update after decoding has ensured each metadata field has its Go type, so the checks
here see strings, string maps, lists of strings and lists of owner-reference objects only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pykubevirt.api.name_validation import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)

# validation.TotalAnnotationSizeLimitB: keys and values of all annotations together.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"

Cause = dict[str, str]
# A kind's name rule: (name, is a generateName prefix) → messages.
NameRule = Callable[[str, bool], list[str]]


def _mask_trailing_dash(name: str, prefix: bool) -> str:
    """A generateName may end in '-': apimachinery checks it as if that dash were a letter."""
    return name[:-1] + "a" if prefix and len(name) > 1 and name.endswith("-") else name


def dns_subdomain_name(name: str, prefix: bool) -> list[str]:
    """NameIsDNSSubdomain: most kinds' name rule."""
    return dns1123_subdomain_errors(_mask_trailing_dash(name, prefix))


def dns_label_name(name: str, prefix: bool) -> list[str]:
    """NameIsDNSLabel: namespaces and services."""
    return dns1123_label_errors(_mask_trailing_dash(name, prefix))


def path_segment_name(name: str, prefix: bool) -> list[str]:
    """IsValidPathSegmentName: RBAC objects (`system:controller`), whose names only have to fit in a URL path."""
    for illegal in (".", ".."):
        if name == illegal and not prefix:
            return [f"may not be '{illegal}'"]
    return [f"may not contain '{illegal}'" for illegal in ("/", "%") if illegal in name]


_DNS_LABEL_KINDS = {("", "Namespace"), ("", "Service")}
_PATH_SEGMENT_GROUPS = {"rbac.authorization.k8s.io"}
# core/v1 Events skip ObjectMeta validation, for old clients (ValidateEventCreate for v1).
_UNVALIDATED_KINDS = {("", "Event")}


def name_rule(group: str, kind: str) -> NameRule | None:
    """The name rule kube-apiserver applies to a kind; None when it does not validate the kind's metadata."""
    if (group, kind) in _UNVALIDATED_KINDS:
        return None
    if (group, kind) in _DNS_LABEL_KINDS:
        return dns_label_name
    if group in _PATH_SEGMENT_GROUPS:
        return path_segment_name
    return dns_subdomain_name


def go_quote(value: str) -> str:
    """Go's %q: printable characters as they are, the rest escaped."""
    out = ['"']
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif char.isprintable() or char == " ":
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


_SHORT_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def invalid(field: str, value: Any, detail: str) -> Cause:
    shown = go_quote(value) if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {shown}: {detail}", "field": field}


def required(field: str, detail: str) -> Cause:
    return {
        "reason": "FieldValueRequired",
        "message": f"Required value: {detail}" if detail else "Required value",
        "field": field,
    }


def forbidden(field: str, detail: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


def duplicate(field: str, value: str) -> Cause:
    return {"reason": "FieldValueDuplicate", "message": f"Duplicate value: {go_quote(value)}", "field": field}


def not_found(field: str, value: str) -> Cause:
    return {"reason": "FieldValueNotFound", "message": f"Not found: {go_quote(value)}", "field": field}


def not_supported(field: str, value: str, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(go_quote(s) for s in supported)
    return {
        "reason": "FieldValueNotSupported",
        "message": f"Unsupported value: {go_quote(value)}: supported values: {listed}",
        "field": field,
    }


def object_meta_causes(meta: dict[str, Any], rule: NameRule, *, namespaced: bool) -> list[Cause]:
    """What ValidateObjectMetaAccessor finds wrong with `meta` (empty when it is valid)."""
    causes: list[Cause] = []
    generate_name = meta.get("generateName")
    if generate_name:
        causes += [invalid("metadata.generateName", generate_name, m) for m in rule(generate_name, True)]
    name = meta.get("name")
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    else:
        causes += [invalid("metadata.name", name, m) for m in rule(name, False)]
    namespace = meta.get("namespace")
    if namespaced:
        if not namespace:
            causes.append(required("metadata.namespace", ""))
        else:
            causes += [invalid("metadata.namespace", namespace, m) for m in dns1123_label_errors(namespace)]
    elif namespace:
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: not allowed on this type",
                "field": "metadata.namespace",
            }
        )
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        causes.append(invalid("metadata.generation", generation, "must be greater than or equal to 0"))
    causes += label_causes(meta.get("labels"))
    causes += annotation_causes(meta.get("annotations"))
    causes += owner_reference_causes(meta.get("ownerReferences"))
    causes += finalizer_causes(meta.get("finalizers"))
    return causes


def label_causes(labels: dict[str, str] | None) -> list[Cause]:
    """ValidateLabels: qualified-name keys and label values, reported on the map's path."""
    causes: list[Cause] = []
    for key, value in (labels or {}).items():
        causes += [invalid("metadata.labels", key, m) for m in qualified_name_errors(key)]
        if value is not None:
            causes += [invalid("metadata.labels", value, m) for m in label_value_errors(value)]
    return causes


def annotation_causes(annotations: dict[str, str] | None) -> list[Cause]:
    """ValidateAnnotations: qualified-name keys (case-insensitive) and 256 KiB for all of them together."""
    causes: list[Cause] = []
    size = 0
    for key, value in (annotations or {}).items():
        causes += [invalid("metadata.annotations", key, m) for m in qualified_name_errors(key.lower())]
        size += len(key.encode()) + len((value or "").encode())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(
            {
                "reason": "FieldValueTooLong",
                "message": f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes",
                "field": "metadata.annotations",
            }
        )
    return causes


def _api_version_has_version(api_version: str) -> bool:
    """schema.FromAPIVersionAndKind yields a version only for `v` or `group/v` with a non-empty v."""
    parts = api_version.split("/")
    return len(parts) <= 2 and bool(parts[-1]) and (len(parts) == 1 or bool(parts[0]))


def owner_reference_causes(refs: list[dict[str, Any]] | None) -> list[Cause]:
    """ValidateOwnerReferences: apiVersion, kind, name and uid set; at most one controller."""
    causes: list[Cause] = []
    field = "metadata.ownerReferences"
    first_controller = ""
    for ref in refs or []:
        if not isinstance(ref, dict):
            continue  # null entries decode to an empty reference
        api_version = str(ref.get("apiVersion") or "")
        if not _api_version_has_version(api_version):
            causes.append(invalid(f"{field}.apiVersion", api_version, "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                causes.append(invalid(f"{field}.{key}", str(ref.get(key) or ""), "must not be empty"))
        if ref.get("controller") is True:
            current = f"{ref.get('kind') or ''}/{ref.get('name') or ''}"
            if first_controller:
                causes.append(
                    invalid(
                        field,
                        refs,
                        'Only one reference can have Controller set to true. Found "true" in references for '
                        f"{first_controller} and {current}",
                    )
                )
            else:
                first_controller = current
    return causes


def finalizer_causes(finalizers: list[str] | None) -> list[Cause]:
    """ValidateFinalizers: qualified names, and not both `orphan` and `foregroundDeletion`."""
    causes: list[Cause] = []
    present = [f for f in finalizers or [] if f is not None]
    for finalizer in present:
        causes += [invalid("metadata.finalizers", finalizer, m) for m in qualified_name_errors(finalizer)]
    if ORPHAN_FINALIZER in present and FOREGROUND_FINALIZER in present:
        causes.append(
            invalid(
                "metadata.finalizers",
                present,
                f"finalizer {ORPHAN_FINALIZER} and {FOREGROUND_FINALIZER} cannot be both set",
            )
        )
    return causes
