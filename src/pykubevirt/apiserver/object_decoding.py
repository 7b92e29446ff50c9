"""What a write's body becomes before admission sees it, as kube-apiserver's decoders leave it.

`decode_object` checks the body is an object of the resource's kind and apiVersion (filled in when absent) and
decodes its fields by the kind's types (`write_validation.decode_fields`). `schema_pass` is what
apiextensions-apiserver's decoder does for a custom resource with a structural schema: unknown fields are reported
per fieldValidation, then pruned, and the schema's defaults applied. Validation against the schema comes later.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.field_hints import unknown_field_messages
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_equal import ABSENT
from pykubevirt.api.structural import apply_defaults, prune, unknown_fields
from pykubevirt.apiserver import body_decoding, write_validation
from pykubevirt.apiserver.resources import Resource


def decode_object(
    resource: Resource,
    body: Any,
    field_validation: str,
    warnings: list[str],
    *,
    max_bytes: int,
    old: dict[str, Any] | None = None,
    checked: dict[str, Any] | None = None,
    patched: bool = False,
    owned: bool = False,
) -> dict[str, Any]:
    """The body as the kind's decoder leaves it (see write_validation), with the resource's kind and version.

    `body` is not changed unless `owned` (a patch's result, made for this write, is decoded in place rather than
    copied). A patched object is checked against `max_bytes`, as a request body is on the wire. `checked` as for
    `write_validation.decode_fields`.
    """
    if not isinstance(body, dict):
        raise errors.bad_request(f"the request body must be a JSON object, not {type(body).__name__}")
    if patched:
        # A patch is bounded on the wire, not in what it makes (JSON patch `copy`, merges into a large object).
        try:
            if not body_decoding.value_surely_within_limits(body, max_bytes):
                body_decoding.check_value(body, max_bytes)
        except body_decoding.DecodeError as exc:
            raise body_decoding.as_api_error(exc, yaml_body=False, max_bytes=max_bytes) from exc
    obj = body if owned else copy_json(body)
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if kind and kind != resource.kind:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version "
            f"({resource.api_version})"
            if api_version and api_version != resource.api_version
            else f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
        )
    if api_version and api_version != resource.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version "
            f"({resource.api_version})"
        )
    obj["kind"] = resource.kind
    obj["apiVersion"] = resource.api_version
    return write_validation.decode_fields(resource, obj, field_validation, warnings, old=old, checked=checked)


def schema_pass(
    resource: Resource,
    obj: dict[str, Any],
    field_validation: str,
    warnings: list[str],
    *,
    checked: dict[str, Any] | None = None,
    owned: bool = False,
) -> dict[str, Any]:
    """Unknown fields per fieldValidation, then pruning and defaulting, as for custom resources.

    Strict refuses unknown fields (400), Warn adds a warning for each, Ignore drops them silently. Without a schema,
    or with one that preserves unknown fields, `obj` is returned as it is. `checked`: the stored object an update
    replaces, when it was written under this schema; what the update leaves as it was there is not walked again.
    `owned`: the caller owns `obj` and keeps only the result, so `obj` is pruned and defaulted in place, not copied.
    """
    schema = resource.schema
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return obj
    old: Any = checked if checked is not None else ABSENT
    unknown = unknown_fields(obj, schema, old=old)
    if unknown:
        messages = unknown_field_messages(unknown)
        if field_validation == write_validation.STRICT:
            raise errors.bad_request(
                f'{resource.kind} in version "{resource.version}" cannot be handled as a {resource.kind}: '
                f"strict decoding error: {', '.join(messages)}"
            )
        if field_validation == write_validation.WARN:
            warnings.extend(messages)
    pruned: dict[str, Any] = prune(obj, schema, old=old, in_place=owned)
    apply_defaults(pruned, schema, old)
    return pruned
