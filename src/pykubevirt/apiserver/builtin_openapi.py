"""Built-in kinds' published schemas, from Kubernetes' own OpenAPI: the definitions `kubernetes-validate` ships.

kubectl explain walks these (pods.spec.containers.image); they are kube's data for the version /version reports,
not hand-written copies. The JSON-schema form of the package becomes OpenAPI's: nullable types lose their null,
int-or-string unions become kube's `format: int-or-string` string, and references with a description are wrapped
in allOf in OpenAPI v3, as kube-apiserver publishes them.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from pykubevirt.apiserver.discovery import KUBE_MINOR

Schema = dict[str, Any]
_SOURCE_PREFIX = "#/$defs/"


@cache
def _definitions() -> dict[str, Any]:
    path = f"kubernetes-json-schema/v1.{KUBE_MINOR}.0-local/_definitions.json"
    data = resources.files("kubernetes_validate").joinpath(path).read_text()
    defs: dict[str, Any] = json.loads(data)["$defs"]
    return defs


def definitions() -> dict[str, Any]:
    """Every definition by name, as shipped (loaded once and shared: server-side apply compiles its types from it)."""
    return _definitions()


@cache
def _by_kind() -> dict[tuple[str, str, str], str]:
    index = {}
    for name, definition in _definitions().items():
        for entry in definition.get("x-kubernetes-group-version-kind") or ():
            index[(entry.get("group", ""), entry.get("version", ""), entry.get("kind", ""))] = name
    return index


def definition_name(group: str, version: str, kind: str) -> str | None:
    """The name of kube's definition of a built-in kind, or None when kube has none."""
    return _by_kind().get((group, version, kind))


def definitions_of(name: str, ref_prefix: str, *, wrap_refs: bool) -> dict[str, Schema]:
    """The definition `name` and every definition it references, as OpenAPI schemas referring by `ref_prefix`."""
    found: dict[str, Schema] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        if current in found:
            continue
        refs: list[str] = []
        found[current] = _convert(_definitions()[current], ref_prefix, wrap_refs, refs)
        pending.extend(r for r in refs if r not in found)
    return found


def _convert(node: Any, ref_prefix: str, wrap_refs: bool, refs: list[str]) -> Any:
    if isinstance(node, list):
        return [_convert(item, ref_prefix, wrap_refs, refs) for item in node]
    if not isinstance(node, dict):
        return node
    if "oneOf" in node and all(isinstance(o, dict) and "type" in o for o in node["oneOf"]):
        union = {t for o in node["oneOf"] for t in _types(o["type"])}
        scalar: Schema = {k: v for k, v in node.items() if k != "oneOf"}
        scalar["type"] = "string"
        if "integer" in union:
            scalar["format"] = "int-or-string"
            scalar["x-kubernetes-int-or-string"] = True
        return scalar
    converted: Schema = {}
    for key, value in node.items():
        if key == "$ref":
            target = str(value).removeprefix(_SOURCE_PREFIX)
            refs.append(target)
            converted[key] = ref_prefix + target
        elif key == "type":
            types = _types(value)
            if types:
                converted[key] = types[0]
        elif key == "enum":
            converted[key] = [v for v in value if v is not None]
        elif key in ("properties", "patternProperties"):
            converted[key] = {k: _convert(v, ref_prefix, wrap_refs, refs) for k, v in value.items()}
        else:
            converted[key] = _convert(value, ref_prefix, wrap_refs, refs)
    if wrap_refs and "$ref" in converted and len(converted) > 1:
        # OpenAPI 3.0 ignores the siblings of $ref.
        converted = {"allOf": [{"$ref": converted.pop("$ref")}], **converted}
    return converted


def _types(value: Any) -> list[str]:
    return [t for t in (value if isinstance(value, list) else [value]) if t != "null"]
