"""Walks objects against structural OpenAPI v3 schemas: unknown fields, pruning, type validation and defaulting.

These follow kube-apiserver's handling of custom resources, so `pykubevirt validate`, the embedded API server and
the CRDs on a real cluster agree on what is kept, what is dropped and what is rejected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_equal import ABSENT, same_json
from pykubevirt.api.schema import Schema

# ObjectMeta fields a client may send; anything else under a root or embedded `metadata` is unknown.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)

_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True, slots=True)
class FieldError:
    """One schema violation, rendered the way apimachinery's field.Error prints."""

    reason: str  # FieldValueRequired | FieldValueInvalid | FieldValueNotSupported | FieldValueTypeInvalid
    field: str
    detail: str

    @property
    def message(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail

    def cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.detail, "field": self.field}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _preserves(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def _is_embedded(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-embedded-resource"))


def _old_child(old: Any, key: str) -> Any:
    return old.get(key, ABSENT) if type(old) is dict else ABSENT


def _old_item(old: Any, index: int) -> Any:
    return old[index] if type(old) is list and index < len(old) else ABSENT


# ---------------------------------------------------------------------------------------------------------------------
# Unknown fields and pruning


def unknown_fields(value: Any, schema: Schema, *, root: bool = True, old: Any = ABSENT) -> list[str]:
    """Dotted paths of every field the schema does not know (what strict field validation reports).

    `old`: the stored object an update replaces, whose unchanged parts are not walked again (see api/json_equal.py).
    """
    found: list[str] = []
    _collect_unknown(value, schema, "", found, old, root=root)
    return found


def _collect_unknown(value: Any, schema: Schema, path: str, found: list[str], old: Any, *, root: bool = False) -> None:
    if old is not ABSENT and type(value) in (dict, list) and same_json(value, old):
        return
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, child in value.items():
            child_path = _join(path, key)
            if (root or _is_embedded(schema)) and key in _ROOT_FIELDS:
                if key == "metadata" and isinstance(child, dict):
                    found.extend(_join(child_path, k) for k in child if k not in OBJECT_META_FIELDS)
                continue
            if key in props:
                _collect_unknown(child, props[key], child_path, found, _old_child(old, key))
            elif isinstance(additional, dict):
                _collect_unknown(child, additional, child_path, found, _old_child(old, key))
            elif not _preserves(schema) and additional is not True:
                found.append(child_path)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _collect_unknown(item, items, f"{path}[{i}]", found, _old_item(old, i))


def prune(value: Any, schema: Schema, *, root: bool = True, old: Any = ABSENT, in_place: bool = False) -> Any:
    """A copy of `value` without unknown fields and without nulls the schema does not allow (kube-apiserver pruning);
    `value` itself, pruned, when `in_place`.

    `old` as for `unknown_fields`: a part equal to it is left as it is, never changed.
    """
    return _prune(value if in_place else copy_json(value), schema, old, root=root)


def _prune(value: Any, schema: Schema, old: Any, *, root: bool = False) -> Any:
    if old is not ABSENT and type(value) in (dict, list) and same_json(value, old):
        return value
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key in list(value):
            child = value[key]
            if (root or _is_embedded(schema)) and key in _ROOT_FIELDS:
                if key == "metadata" and isinstance(child, dict):
                    for meta_key in [k for k in child if k not in OBJECT_META_FIELDS]:
                        del child[meta_key]
                continue
            child_schema = props.get(key)
            if child_schema is None and isinstance(additional, dict):
                child_schema = additional
            if child_schema is None:
                if not _preserves(schema) and additional is not True:
                    del value[key]
                continue
            if child is None and not child_schema.get("nullable"):
                del value[key]
                continue
            value[key] = _prune(child, child_schema, _old_child(old, key))
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            kept = [item for item in value if item is not None or items.get("nullable")]
            return [_prune(item, items, _old_item(old, i)) for i, item in enumerate(kept)]
    return value


# ---------------------------------------------------------------------------------------------------------------------
# Validation


def validate(value: Any, schema: Schema, *, root: bool = True, old: Any = ABSENT) -> list[FieldError]:
    """Type, enum, required, pattern and bound violations, in apiextensions' message format.

    `old` as for `unknown_fields`: what an update did not change is not reported again.
    """
    errors: list[FieldError] = []
    _validate(value, schema, "", errors, old, root=root)
    return errors


def _type_error(path: str, value: Any, expected: str) -> FieldError:
    got = _json_type(value)
    return FieldError(
        "FieldValueTypeInvalid", path, f'Invalid value: "{got}": {path} in body must be of type {expected}: "{got}"'
    )


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _validate(value: Any, schema: Schema, path: str, errors: list[FieldError], old: Any, *, root: bool = False) -> None:
    if old is not ABSENT and type(value) in (dict, list) and same_json(value, old):
        return
    if value is None:
        if schema.get("nullable"):
            return
        # Nulls are pruned before validation in kube-apiserver; only a required field missing is reported (by parent).
        return
    if schema.get("x-kubernetes-int-or-string"):
        if _json_type(value) not in ("integer", "string"):
            errors.append(_type_error(path, value, "integer,string"))
            return
        pattern = schema.get("pattern")
        if pattern and isinstance(value, str) and not re.match(pattern, value):
            errors.append(
                FieldError(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_quote(value)}: {path} in body should match '{pattern}'",
                )
            )
        return
    expected = schema.get("type")
    actual = _json_type(value)
    if expected:
        if expected == "number" and actual in ("integer", "number"):
            pass
        elif expected != actual:
            if not (_preserves(schema) and expected == "object" and actual == "object"):
                errors.append(_type_error(path, value, expected))
                return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_quote(v) for v in schema["enum"])
        errors.append(
            FieldError(
                "FieldValueNotSupported", path, f"Unsupported value: {_quote(value)}: supported values: {supported}"
            )
        )
    if isinstance(value, str):
        _validate_string(value, schema, path, errors)
    elif actual in ("integer", "number"):
        _validate_number(value, schema, path, errors)
    elif isinstance(value, dict):
        _validate_object(value, schema, path, errors, old, root=root)
    elif isinstance(value, list):
        items = schema.get("items")
        max_items = schema.get("maxItems")
        if max_items is not None and len(value) > max_items:
            errors.append(
                FieldError("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {max_items} items")
            )
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _validate(item, items, f"{path}[{i}]", errors, _old_item(old, i))


def _validate_object(
    value: dict[str, Any], schema: Schema, path: str, errors: list[FieldError], old: Any, *, root: bool
) -> None:
    for name in schema.get("required") or ():
        if value.get(name) is None:
            errors.append(FieldError("FieldValueRequired", _join(path, name), "Required value"))
    props: dict[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, child in value.items():
        if (root or _is_embedded(schema)) and key in _ROOT_FIELDS:
            continue
        child_schema = props.get(key) or (additional if isinstance(additional, dict) else None)
        if child_schema is not None:
            _validate(child, child_schema, _join(path, key), errors, _old_child(old, key))


def _validate_string(value: str, schema: Schema, path: str, errors: list[FieldError]) -> None:
    pattern = schema.get("pattern")
    if pattern and not re.search(pattern, value):
        errors.append(
            FieldError(
                "FieldValueInvalid", path, f"Invalid value: {_quote(value)}: {path} in body should match '{pattern}'"
            )
        )
    max_length = schema.get("maxLength")
    if max_length is not None and len(value) > max_length:
        errors.append(FieldError("FieldValueTooLong", path, f"Too long: may not be more than {max_length} bytes"))
    if schema.get("format") == "date-time" and not _is_datetime(value):
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_quote(value)}: {path} in body must be of type date-time: {_quote(value)}",
            )
        )


def _is_datetime(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _validate_number(value: float, schema: Schema, path: str, errors: list[FieldError]) -> None:
    minimum = schema.get("minimum")
    if minimum is not None and value < minimum:
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_quote(value)}: {path} in body should be greater than or equal to {minimum}",
            )
        )
    maximum = schema.get("maximum")
    if maximum is not None and value > maximum:
        errors.append(
            FieldError(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_quote(value)}: {path} in body should be less than or equal to {maximum}",
            )
        )


# ---------------------------------------------------------------------------------------------------------------------
# Defaulting


def apply_defaults(value: Any, schema: Schema, old: Any = ABSENT) -> Any:
    """Fill `default`s of absent fields in objects that exist, as structural defaulting does (in place).

    `old` as for `unknown_fields`.
    """
    if old is not ABSENT and type(value) in (dict, list) and same_json(value, old):
        return value
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        for key, field_schema in props.items():
            if key not in value and "default" in field_schema:
                value[key] = copy_json(field_schema["default"])
        additional = schema.get("additionalProperties")
        for key, child in value.items():
            child_schema = props.get(key)
            if child_schema is None and isinstance(additional, dict):
                child_schema = additional
            if child_schema is not None:
                apply_defaults(child, child_schema, _old_child(old, key))
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                apply_defaults(item, items, _old_item(old, i))
    return value


# ---------------------------------------------------------------------------------------------------------------------
# Structural-schema check


def structural_violations(schema: Schema, path: str = "") -> list[str]:
    """Reasons a schema would not be accepted by kube-apiserver as structural (python-stack.md §B2)."""
    problems: list[str] = []
    where = path or "<root>"
    if "$ref" in schema or "definitions" in schema or "$defs" in schema:
        problems.append(f"{where}: $ref/definitions are not allowed")
    if schema.get("uniqueItems"):
        problems.append(f"{where}: uniqueItems cannot be set to true")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{where}: additionalProperties and properties are mutually exclusive")
    int_or_string = schema.get("x-kubernetes-int-or-string")
    if "type" not in schema and not int_or_string and not _preserves(schema):
        problems.append(f"{where}: type must be specified")
    for junction in ("anyOf", "oneOf", "allOf"):
        for i, branch in enumerate(schema.get(junction) or ()):
            bad = {"type", "nullable", "default", "additionalProperties", "description"} & set(branch)
            if junction == "anyOf" and int_or_string and set(branch) <= {"type"}:
                continue
            if bad:
                problems.append(f"{where}.{junction}[{i}]: {', '.join(sorted(bad))} must not be set inside {junction}")
    if "not" in schema:
        problems.append(f"{where}: 'not' is not supported here")
    for key, child in (schema.get("properties") or {}).items():
        problems.extend(structural_violations(child, _join(path, key)))
    if isinstance(schema.get("items"), dict):
        problems.extend(structural_violations(schema["items"], f"{path}[]"))
    elif "items" in schema:
        problems.append(f"{where}: items must be a single schema")
    if isinstance(schema.get("additionalProperties"), dict):
        problems.extend(structural_violations(schema["additionalProperties"], f"{path}{{}}"))
    if schema.get("type") == "array" and "items" not in schema:
        problems.append(f"{where}: items must be specified for arrays")
    return problems
