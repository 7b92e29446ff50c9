"""Which webhooks a request reaches, as kube-apiserver's predicates decide it."""

from __future__ import annotations

from typing import Any

from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.webhook_matching import Attributes, rule_matches, rule_names, webhook_matches

PODS = Resource("", "v1", "Pod", "pods", "pod", True)


def _attrs(
    operation: str = "CREATE",
    resource: str = "pods",
    subresource: str = "",
    namespace: str = "ns",
    labels: dict[str, str] | None = None,
    old_labels: dict[str, str] | None = None,
    group: str = "",
) -> Attributes:
    obj = {"metadata": {"name": "x", "labels": labels or {}}}
    old = {"metadata": {"name": "x", "labels": old_labels}} if old_labels is not None else None
    return Attributes(operation, group, "v1", resource, subresource, namespace, "x", obj, old)


def _rule(resources: list[str], operations: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "operations": operations or ["CREATE"],
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": resources,
        **extra,
    }


def test_resources_match_with_their_subresources_as_kube_splits_them() -> None:
    assert rule_matches(_rule(["pods"]), _attrs())
    assert not rule_matches(_rule(["pods"]), _attrs(subresource="eviction"))
    assert rule_matches(_rule(["pods/eviction"]), _attrs(subresource="eviction"))
    assert rule_matches(_rule(["pods/*"]), _attrs(subresource="status"))
    assert not rule_matches(_rule(["*"]), _attrs(subresource="status"))
    assert rule_matches(_rule(["*/*"]), _attrs(subresource="status"))
    assert not rule_matches(_rule(["pods"], ["UPDATE"]), _attrs())
    assert rule_matches(_rule(["pods"], ["*"]), _attrs(operation="DELETE"))


def test_scope_tells_cluster_objects_and_namespaces_from_namespaced_ones() -> None:
    assert not rule_matches(_rule(["*"], scope="Cluster"), _attrs())
    assert rule_matches(_rule(["namespaces"], scope="Cluster"), _attrs(resource="namespaces", namespace="ns"))
    assert not rule_matches(_rule(["namespaces"], scope="Namespaced"), _attrs(resource="namespaces", namespace="ns"))
    assert rule_matches(_rule(["pods"], scope="Namespaced"), _attrs())


def test_selectors_use_the_namespace_labels_and_the_new_or_old_object() -> None:
    labels = {"ns": {"env": "prod"}}
    hook = {"rules": [_rule(["pods"], ["*"])], "namespaceSelector": {"matchLabels": {"env": "prod"}}}
    assert webhook_matches(hook, _attrs(), labels.get)
    assert not webhook_matches(hook, _attrs(namespace="other"), labels.get)
    # Cluster-scoped objects are not held back by a namespaceSelector.
    assert webhook_matches(hook, _attrs(namespace=""), labels.get)
    hook = {"rules": [_rule(["pods"], ["*"])], "objectSelector": {"matchLabels": {"app": "vm"}}}
    assert webhook_matches(hook, _attrs(labels={"app": "vm"}), labels.get)
    assert webhook_matches(hook, _attrs(operation="UPDATE", labels={}, old_labels={"app": "vm"}), labels.get)
    assert not webhook_matches(hook, _attrs(labels={"app": "other"}), labels.get)


def test_rule_names_decides_which_writes_may_await_webhooks() -> None:
    assert rule_names(_rule(["pods/eviction"]), PODS)
    assert not rule_names({**_rule(["pods"]), "apiGroups": ["apps"]}, PODS)
    assert not rule_names(_rule(["configmaps"]), PODS)
