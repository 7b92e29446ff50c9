"""Which admission webhooks a request reaches: rules, scope, namespaceSelector and objectSelector, as kube-apiserver
matches them (apiserver/pkg/admission/plugin/webhook/predicates)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.api.label_selectors import SelectorError, label_selector_from_dict
from pykubevirt.apiserver.resources import Resource


@dataclass(frozen=True, slots=True)
class Attributes:
    """What admission knows of one request (admission.Attributes)."""

    operation: str
    group: str
    version: str
    resource: str
    subresource: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None


def _split(resource: str) -> tuple[str, str]:
    base, _, sub = resource.partition("/")
    return base, sub


def _resource_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    for entry in rule.get("resources") or []:
        base, sub = _split(str(entry))
        if (base == "*" or base == attrs.resource) and (sub == "*" or sub == attrs.subresource):
            return True
    return False


def _scope_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    scope = rule.get("scope") or "*"
    is_namespace_object = attrs.group == "" and attrs.resource == "namespaces" and not attrs.subresource
    if scope == "Cluster":
        return not attrs.namespace or is_namespace_object
    if scope == "Namespaced":
        return bool(attrs.namespace) and not is_namespace_object
    return True


def rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """One RuleWithOperations against a request."""

    def listed(key: str, value: str) -> bool:
        values = [str(v) for v in rule.get(key) or []]
        return "*" in values or value in values

    return (
        listed("operations", attrs.operation)
        and listed("apiGroups", attrs.group)
        and listed("apiVersions", attrs.version)
        and _resource_matches(rule, attrs)
        and _scope_matches(rule, attrs)
    )


def rule_names(rule: Mapping[str, Any], resource: Resource) -> bool:
    """Whether a rule names this resource's group, version and plural (any operation, subresource and scope)."""
    groups = [str(g) for g in rule.get("apiGroups") or []]
    versions = [str(v) for v in rule.get("apiVersions") or []]
    if not ("*" in groups or resource.group in groups) or not ("*" in versions or resource.version in versions):
        return False
    return any(_split(str(entry))[0] in ("*", resource.plural) for entry in rule.get("resources") or [])


def _labels(obj: dict[str, Any] | None) -> dict[str, str] | None:
    if obj is None:
        return None
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def object_selector_matches(webhook: Mapping[str, Any], attrs: Attributes) -> bool:
    """The new or the old object carries the selected labels (an empty selector selects everything)."""
    selector = label_selector_from_dict(webhook.get("objectSelector") or {})
    if selector.empty:
        return True
    return any(labels is not None and selector.matches(labels) for labels in (_labels(attrs.obj), _labels(attrs.old)))


def namespace_selector_matches(
    webhook: Mapping[str, Any], attrs: Attributes, namespace_labels: Callable[[str], dict[str, str] | None]
) -> bool:
    """The request's namespace carries the selected labels; cluster-scoped objects (not namespaces) always match."""
    selector = label_selector_from_dict(webhook.get("namespaceSelector") or {})
    if selector.empty:
        return True
    if attrs.group == "" and attrs.resource == "namespaces" and not attrs.subresource:
        return selector.matches(_labels(attrs.obj if attrs.obj is not None else attrs.old) or {})
    if not attrs.namespace:
        return True
    labels = namespace_labels(attrs.namespace)
    # A namespace not found (yet): kube-apiserver answers an error; matching nothing would skip a Fail webhook.
    return selector.matches(labels or {})


def webhook_matches(
    webhook: Mapping[str, Any], attrs: Attributes, namespace_labels: Callable[[str], dict[str, str] | None]
) -> bool:
    """Whether kube-apiserver would call this webhook for the request."""
    if not any(rule_matches(rule, attrs) for rule in webhook.get("rules") or []):
        return False
    try:
        return namespace_selector_matches(webhook, attrs, namespace_labels) and object_selector_matches(webhook, attrs)
    except SelectorError:
        return False
