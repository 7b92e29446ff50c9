"""The /scale subresource of a kind: the autoscaling/v1 Scale an object shows, and the object a Scale write makes.

As kube-apiserver serves it for custom resources (apiextensions-apiserver's ScaleREST): replicas are read from and
written to the JSON paths a CRD's `subresources.scale` names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_lookup import get
from pykubevirt.api.label_selectors import SelectorError, label_selector_from_dict

INT32_MAX = 2**31 - 1
SCALE_API_VERSION = "autoscaling/v1"


@dataclass(frozen=True, slots=True)
class ScaleSubresource:
    """Where a kind keeps what its /scale subresource shows: JSON paths as a CRD's `subresources.scale` names them."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str = ""

    def to_crd(self) -> dict[str, str]:
        scale = {"specReplicasPath": self.spec_replicas_path, "statusReplicasPath": self.status_replicas_path}
        if self.label_selector_path:
            scale["labelSelectorPath"] = self.label_selector_path
        return scale

    @classmethod
    def from_crd(cls, scale: Mapping[str, Any]) -> ScaleSubresource:
        return cls(
            str(scale.get("specReplicasPath") or ""),
            str(scale.get("statusReplicasPath") or ""),
            str(scale.get("labelSelectorPath") or ""),
        )


_SIMPLE_PATH = re.compile(r"(\.[A-Za-z0-9_-]+)+")
_PATH_RULES = (
    ("specReplicasPath", (".spec.",), "should be a json path under .spec", True),
    ("statusReplicasPath", (".status.",), "should be a json path under .status", True),
    ("labelSelectorPath", (".spec.", ".status."), "should be a json path under either .spec or .status", False),
)


def scale_path_causes(scale: Mapping[str, Any], field: str) -> list[dict[str, str]]:
    """kube's checks of a CRD's `subresources.scale`: the replicas paths are required, and each path is a simple JSON
    path under the part it names (`field`: the path of the scale stanza in the CRD)."""
    causes: list[dict[str, str]] = []
    for key, prefixes, detail, needed in _PATH_RULES:
        path = scale.get(key)
        where = f"{field}.{key}"
        if not path:
            if needed:
                causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": where})
            continue
        if not isinstance(path, str) or not _SIMPLE_PATH.fullmatch(path):
            causes.append(_invalid_path(where, path, "must be a simple json path starting with ."))
        elif not path.startswith(prefixes):
            causes.append(_invalid_path(where, path, detail))
    return causes


def _invalid_path(field: str, path: object, detail: str) -> dict[str, str]:
    return {"reason": "FieldValueInvalid", "message": f'Invalid value: "{path}": {detail}', "field": field}


def _steps(path: str) -> list[str]:
    return [step for step in path.split(".") if step]


def _lookup(obj: Mapping[str, Any], path: str) -> Any:
    return get(obj, *_steps(path))


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _selector_text(value: Any) -> str:
    """The selector as Scale's `status.selector` string: a string as stored, or a LabelSelector object rendered
    (what the apps kinds keep in `spec.selector`)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        try:
            return str(label_selector_from_dict(value))
        except SelectorError:
            return ""
    return ""


def spec_replicas(obj: Mapping[str, Any], scale: ScaleSubresource) -> int | None:
    """The object's wanted replicas, None when it has none set."""
    return _integer(_lookup(obj, scale.spec_replicas_path))


def scale_of(obj: Mapping[str, Any], scale: ScaleSubresource) -> dict[str, Any]:
    """The Scale an object shows: spec replicas (0 when unset), status replicas (0 when unset) and the selector."""
    meta = obj.get("metadata") or {}
    scale_meta: dict[str, Any] = {"name": meta.get("name", "")}
    for key in ("namespace", "uid", "resourceVersion", "creationTimestamp"):
        if meta.get(key):
            scale_meta[key] = meta[key]
    spec: dict[str, Any] = {}
    wanted = spec_replicas(obj, scale) or 0
    if wanted:
        spec["replicas"] = wanted
    status: dict[str, Any] = {"replicas": _integer(_lookup(obj, scale.status_replicas_path)) or 0}
    if scale.label_selector_path:
        selector = _selector_text(_lookup(obj, scale.label_selector_path))
        if selector:
            status["selector"] = selector
    return {"kind": "Scale", "apiVersion": SCALE_API_VERSION, "metadata": scale_meta, "spec": spec, "status": status}


class ScaleRefused(ValueError):
    """A Scale body that cannot be applied (kube answers 400 Bad Request)."""


def scaled(obj: Mapping[str, Any], scale: ScaleSubresource, new_scale: Any) -> tuple[dict[str, Any], str]:
    """The object with the Scale's replicas written to its spec path, and the resourceVersion the Scale names ('' for
    none: no precondition)."""
    if not isinstance(new_scale, Mapping):
        raise ScaleRefused("wrong object passed to Scale update")
    spec = new_scale.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ScaleRefused("wrong object passed to Scale update")
    raw = spec.get("replicas", 0)
    replicas = _integer(raw) if raw is not None else 0
    if replicas is None:
        kind = "string" if isinstance(raw, str) else "bool" if isinstance(raw, bool) else "number"
        raise ScaleRefused(f"json: cannot unmarshal {kind} into Go struct field ScaleSpec.spec.replicas of type int32")
    updated = copy_json(dict(obj))
    node = updated
    *parents, last = _steps(scale.spec_replicas_path)
    for step in parents:
        child = node.get(step)
        if not isinstance(child, dict):
            child = node[step] = {}
        node = child
    node[last] = replicas
    meta = new_scale.get("metadata") or {}
    version = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
    return updated, version


def scale_errors(obj: Mapping[str, Any], scale: ScaleSubresource, *, status: bool) -> list[dict[str, str]]:
    """kube's ValidateScaleSpec (`status` False) or ValidateScaleStatus (True) of a custom resource, as causes."""
    causes: list[dict[str, str]] = []
    paths = [scale.status_replicas_path] if status else [scale.spec_replicas_path]
    for path in paths:
        value = _integer(_lookup(obj, path))
        if value is None:
            continue
        if value < 0:
            causes.append(_invalid(path, value, "should be a non-negative integer"))
        elif value > INT32_MAX:
            causes.append(_invalid(path, value, f"should be less than or equal to {INT32_MAX}"))
    if status and scale.label_selector_path:
        selector = _lookup(obj, scale.label_selector_path)
        if selector is not None and not isinstance(selector, str):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {selector!r}: must be a string",
                    "field": scale.label_selector_path,
                }
            )
    return causes


def _invalid(path: str, value: int, detail: str) -> dict[str, str]:
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {value}: {detail}", "field": path}


def scale_table(scales: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """kube's printer for Scale (`kubectl get --subresource=scale`): name, desired and current replicas."""
    columns = [
        {"name": "Name", "type": "string", "format": "name", "description": "Name of the object.", "priority": 0},
        {"name": "Desired", "type": "integer", "format": "", "description": "Desired replicas.", "priority": 0},
        {"name": "Available", "type": "integer", "format": "", "description": "Actual replicas.", "priority": 0},
    ]
    rows = [[s["metadata"]["name"], s["spec"].get("replicas", 0), s["status"].get("replicas", 0)] for s in scales]
    return columns, rows
