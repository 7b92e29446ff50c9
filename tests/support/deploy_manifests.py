"""deploy/ as a cluster sees it: rendered by the real kubectl's kustomize, and checked offline as kube-apiserver would.

Built-in kinds are validated against Kubernetes' own JSON schemas (kubernetes-validate ships one set per release,
strict: unknown fields are errors); custom resources against the openAPIV3Schema of the CRD the render installs.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from pykubevirt.api import structural
from tests.paths import REPO
from tests.support.apiserver_process import KUBECTL

DEPLOY = REPO / "deploy"
KUBEVIRT_CR = DEPLOY / "kubevirt-cr.yaml"
# The Kubernetes releases deploy/ is checked against (the supported window when it was written).
KUBE_VERSIONS = ("1.30", "1.31", "1.32", "1.33")


def render(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIRECTORY`: every object `kubectl apply -k` would send."""
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@cache
def rendered() -> tuple[dict[str, Any], ...]:
    """deploy/ rendered once for the session (the objects are read-only by convention)."""
    return tuple(render(DEPLOY))


def of_kind(kind: str, objects: tuple[dict[str, Any], ...] | None = None) -> list[dict[str, Any]]:
    return [o for o in (rendered() if objects is None else objects) if o["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in of_kind(kind) if o["metadata"]["name"] == name]
    return found


def crd_schema(objects: tuple[dict[str, Any], ...], api_version: str, kind: str) -> dict[str, Any] | None:
    """The openAPIV3Schema an installed CRD gives `kind` at `api_version`, or None if no CRD serves it."""
    group, _, version = api_version.rpartition("/")
    for crd in of_kind("CustomResourceDefinition", objects):
        spec = crd["spec"]
        if spec["group"] != group or spec["names"]["kind"] != kind:
            continue
        for served in spec["versions"]:
            if served["name"] == version and served["served"]:
                schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
                return schema
    return None


def problems(obj: dict[str, Any], version: str, objects: tuple[dict[str, Any], ...]) -> list[str]:
    """Why a cluster at Kubernetes `version` with `objects` installed would reject `obj` (empty: it accepts it)."""
    where = f"{obj['kind']} {obj['metadata'].get('name')}"
    schema = crd_schema(objects, obj["apiVersion"], obj["kind"])
    if schema is not None:
        found = [f"{where}: unknown field {path}" for path in structural.unknown_fields(obj, schema)]
        found += [f"{where}: {error.message}" for error in structural.validate(obj, schema)]
        return found
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{where}: {exc.json_path}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"{where}: {exc.message}"]
    return []


def kubevirt_cr() -> dict[str, Any]:
    (cr,) = [d for d in yaml.safe_load_all(KUBEVIRT_CR.read_text()) if d]
    return dict(cr)
