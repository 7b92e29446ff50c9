"""The roles and bindings the server creates at start: kube's bootstrap policy, plus what extensions hand in.

Like kube-apiserver's RBAC post-start hook: missing objects are created, and objects still carrying the
`rbac.authorization.kubernetes.io/autoupdate: "true"` annotation are brought back to the shipped rules and
subjects. Removing the annotation keeps an administrator's edits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import yaml

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import SYSTEM_USER, RequestContext
from pykubevirt.apiserver.resources import Registry

log = logging.getLogger("pykubevirt.apiserver.rbac")

AUTOUPDATE_ANNOTATION = "rbac.authorization.kubernetes.io/autoupdate"
BOOTSTRAPPING_LABEL = "kubernetes.io/bootstrapping"
POLICY_FILES = ("kubernetes.yaml", "nodes.yaml")
PLURALS = {
    "ClusterRole": "clusterroles",
    "Role": "roles",
    "ClusterRoleBinding": "clusterrolebindings",
    "RoleBinding": "rolebindings",
}
# What reconciliation restores; an aggregated role's rules belong to the aggregation controller.
OWNED_FIELDS = ("rules", "aggregationRule", "subjects")


def load_policy(folder: Traversable, names: Iterable[str]) -> tuple[dict[str, Any], ...]:
    """The RBAC objects in these YAML files, labelled and annotated as kube's bootstrap objects are."""
    found: list[dict[str, Any]] = []
    for name in names:
        for document in yaml.safe_load_all((folder / name).read_text()):
            if not document:
                continue
            meta = document.setdefault("metadata", {})
            meta.setdefault("labels", {}).setdefault(BOOTSTRAPPING_LABEL, "rbac-defaults")
            meta.setdefault("annotations", {})[AUTOUPDATE_ANNOTATION] = "true"
            found.append(document)
    return tuple(found)


@cache
def bootstrap_policy() -> tuple[dict[str, Any], ...]:
    """Kube's own shipped objects (the roles every cluster has, and the node agents' bindings)."""
    return load_policy(resources.files("pykubevirt.apiserver.authorization") / "policy", POLICY_FILES)


def reconcile_bootstrap_policy(api: ObjectAPI, registry: Registry, extra: Iterable[dict[str, Any]] = ()) -> None:
    """Create missing bootstrap objects (kube's and `extra`) and restore those still marked for automatic update."""
    ctx = RequestContext(user=SYSTEM_USER)
    for shipped in (*bootstrap_policy(), *extra):
        resource = registry.builtin("rbac.authorization.k8s.io", "v1", PLURALS[shipped["kind"]])
        meta = shipped["metadata"]
        namespace = meta.get("namespace")
        current = api.find(resource, namespace, meta["name"])
        try:
            if current is None:
                api.create(resource, namespace, copy_json(shipped), ctx)
                continue
            annotations = (current.get("metadata") or {}).get("annotations") or {}
            if annotations.get(AUTOUPDATE_ANNOTATION) != "true":
                continue
            wanted = copy_json(current)
            for field in OWNED_FIELDS:
                if field == "rules" and "aggregationRule" in shipped:
                    continue
                if field in shipped:
                    wanted[field] = copy_json(shipped[field])
                else:
                    wanted.pop(field, None)
            if wanted != current:
                api.update(resource, namespace, meta["name"], wanted, ctx)
        except errors.APIError as exc:
            log.warning("could not reconcile %s %s: %s", shipped["kind"], meta["name"], exc)
