"""/openapi/v2: the Swagger 2.0 form of the OpenAPI v3 documents, with every operation and definition they hold.

Swagger 2.0 has no requestBody (a `body` parameter instead), no content maps (consumes/produces), no anyOf, oneOf
or nullable, and its references point into #/definitions/.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pykubevirt.apiserver.openapi_schemas import V2_REF_PREFIX, V3_REF_PREFIX

Schema = dict[str, Any]
_METHODS = ("get", "put", "post", "delete", "patch")
_GVK = "x-kubernetes-group-version-kind"


def swagger(documents: Iterable[Schema], info: Schema) -> Schema:
    """One Swagger 2.0 document from the v3 documents of every group-version."""
    paths: dict[str, Schema] = {}
    definitions: dict[str, Schema] = {}
    for document in documents:
        for path, item in document.get("paths", {}).items():
            paths[path] = _path_item(item)
        for name, schema in document.get("components", {}).get("schemas", {}).items():
            converted = _schema(schema)
            existing = definitions.setdefault(name, converted)
            if existing is not converted and isinstance(existing.get(_GVK), list):
                # DeleteOptions and the like are published by every group-version, each adding its GVK.
                existing[_GVK] += [g for g in converted.get(_GVK, []) if g not in existing[_GVK]]
    return {
        "swagger": "2.0",
        "info": info,
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    }


def _schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted: Schema = {}
    for key, value in node.items():
        if key in ("nullable", "anyOf", "oneOf"):
            continue
        if key == "$ref" and isinstance(value, str):
            converted[key] = V2_REF_PREFIX + value.removeprefix(V3_REF_PREFIX)
        elif key in ("properties", "patternProperties") and isinstance(value, dict):
            converted[key] = {k: _schema(v) for k, v in value.items()}
        else:
            converted[key] = _schema(value)
    return converted


def _parameter(parameter: Schema) -> Schema:
    converted: Schema = {k: parameter[k] for k in ("name", "in", "description", "required") if k in parameter}
    schema = parameter.get("schema") or {}
    converted.update({k: schema[k] for k in ("type", "format", "uniqueItems", "items") if k in schema})
    converted.setdefault("type", "string")
    return converted


def _path_item(item: Schema) -> Schema:
    converted: Schema = {m: _operation(item[m]) for m in _METHODS if m in item}
    if "parameters" in item:
        converted["parameters"] = [_parameter(p) for p in item["parameters"]]
    return converted


def _operation(operation: Schema) -> Schema:
    keep = ("description", "operationId", "tags", "x-kubernetes-action", _GVK)
    converted: Schema = {k: operation[k] for k in keep if k in operation}
    parameters = [_parameter(p) for p in operation.get("parameters", [])]
    body = operation.get("requestBody")
    if body:
        content: Schema = body.get("content") or {}
        converted["consumes"] = list(content)
        media: Schema = next(iter(content.values()), {})
        schema = _schema(media.get("schema", {}))
        parameters.insert(0, {"name": "body", "in": "body", "required": bool(body.get("required")), "schema": schema})
    produces: list[str] = []
    responses: Schema = {}
    for code, response in (operation.get("responses") or {}).items():
        answer: Schema = {"description": response.get("description", "")}
        content = response.get("content") or {}
        produces += [media for media in content if media not in produces]
        if content:
            answer["schema"] = _schema(next(iter(content.values())).get("schema", {}))
        responses[code] = answer
    converted["produces"] = produces or ["application/json"]
    converted["schemes"] = ["https"]
    converted["parameters"] = parameters
    converted["responses"] = responses
    return converted
