"""kube's RBAC authorizer over plain data: PolicyRule matching, subjects, and the roles a user is bound to.

Follows k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac: a request is allowed when any rule of any role bound to
the user (cluster-wide, or in the request's namespace) allows it; nothing denies. `system:masters` is allowed
everything before RBAC is asked, as kube-apiserver's privileged-groups authorizer does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.apiserver.authorization.attributes import Attributes
from pykubevirt.apiserver.request_context import UserInfo

SYSTEM_MASTERS = "system:masters"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RBAC_GROUP = "rbac.authorization.k8s.io"
# Resolved rules are cached per (user, groups, namespace) until the policy changes; bounded against many users.
MAX_CACHED_SUBJECTS = 4096

Rule = dict[str, Any]


def _strings(rule: Rule, key: str) -> list[str]:
    values = rule.get(key) or []
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def verb_matches(rule: Rule, verb: str) -> bool:
    verbs = _strings(rule, "verbs")
    return "*" in verbs or verb in verbs


def api_group_matches(rule: Rule, group: str) -> bool:
    groups = _strings(rule, "apiGroups")
    return "*" in groups or group in groups


def resource_matches(rule: Rule, combined: str, subresource: str) -> bool:
    for candidate in _strings(rule, "resources"):
        if candidate == "*" or candidate == combined:
            return True
        # `*/scale` grants the scale subresource of every resource.
        if subresource and candidate == f"*/{subresource}":
            return True
    return False


def resource_name_matches(rule: Rule, name: str) -> bool:
    names = _strings(rule, "resourceNames")
    return not names or name in names


def non_resource_url_matches(rule: Rule, path: str) -> bool:
    for url in _strings(rule, "nonResourceURLs"):
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(attributes: Attributes, rule: Rule) -> bool:
    """rbac.RuleAllows."""
    if attributes.resource_request:
        return (
            verb_matches(rule, attributes.verb)
            and api_group_matches(rule, attributes.api_group)
            and resource_matches(rule, attributes.combined_resource, attributes.subresource)
            and resource_name_matches(rule, attributes.name)
        )
    return verb_matches(rule, attributes.verb) and non_resource_url_matches(rule, attributes.path)


def service_account_user(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def applies_to(user: UserInfo, subject: dict[str, Any], namespace: str) -> bool:
    """rbac.appliesToUser: a ServiceAccount subject without a namespace means one in the binding's namespace."""
    kind = subject.get("kind")
    name = subject.get("name")
    if kind == "User":
        return bool(user.username == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.username == service_account_user(str(sa_namespace), str(name))
    return False


@dataclass(frozen=True, slots=True)
class Binding:
    """A (Cluster)RoleBinding reduced to what authorization reads."""

    kind: str
    name: str
    namespace: str
    role_kind: str
    role_name: str
    subjects: tuple[dict[str, Any], ...]

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Binding:
        meta = obj.get("metadata") or {}
        ref = obj.get("roleRef") or {}
        subjects = tuple(s for s in obj.get("subjects") or [] if isinstance(s, dict))
        return cls(
            str(obj.get("kind", "")),
            str(meta.get("name", "")),
            str(meta.get("namespace") or ""),
            str(ref.get("kind", "")),
            str(ref.get("name", "")),
            subjects,
        )

    def describe(self, subject: dict[str, Any]) -> str:
        """The part of kube's allow reason that names this binding, e.g. `RoleBinding "x/y" of Role "r"`."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        who = subject.get("name", "")
        if subject.get("kind") == "ServiceAccount":
            who = f"{subject.get('namespace') or self.namespace}/{who}"
        return f'{self.kind} "{where}" of {self.role_kind} "{self.role_name}" to {subject.get("kind")} "{who}"'


def _rules_of(obj: dict[str, Any]) -> list[Rule]:
    return [r for r in obj.get("rules") or [] if isinstance(r, dict)]


@dataclass(slots=True)
class Policy:
    """Every role and binding, as plain data (the four RBAC kinds' objects)."""

    cluster_roles: dict[str, list[Rule]] = field(default_factory=dict)
    roles: dict[tuple[str, str], list[Rule]] = field(default_factory=dict)
    cluster_role_bindings: list[Binding] = field(default_factory=list)
    role_bindings: dict[str, list[Binding]] = field(default_factory=dict)

    @classmethod
    def from_objects(
        cls,
        cluster_roles: Iterable[dict[str, Any]] = (),
        roles: Iterable[dict[str, Any]] = (),
        cluster_role_bindings: Iterable[dict[str, Any]] = (),
        role_bindings: Iterable[dict[str, Any]] = (),
    ) -> Policy:
        policy = cls()
        for obj in cluster_roles:
            policy.cluster_roles[str((obj.get("metadata") or {}).get("name", ""))] = _rules_of(obj)
        for obj in roles:
            meta = obj.get("metadata") or {}
            policy.roles[(str(meta.get("namespace") or ""), str(meta.get("name", "")))] = _rules_of(obj)
        policy.cluster_role_bindings = [
            Binding.from_object({**obj, "kind": "ClusterRoleBinding"}) for obj in cluster_role_bindings
        ]
        for obj in role_bindings:
            binding = Binding.from_object({**obj, "kind": "RoleBinding"})
            policy.role_bindings.setdefault(binding.namespace, []).append(binding)
        return policy

    def role_rules(self, binding: Binding) -> list[Rule]:
        """The rules of a binding's role; a missing role grants nothing (kube logs and skips it)."""
        if binding.role_kind == "ClusterRole":
            return self.cluster_roles.get(binding.role_name, [])
        if binding.role_kind == "Role" and binding.namespace:
            return self.roles.get((binding.namespace, binding.role_name), [])
        return []


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


# What one binding contributes to one user: the reason text (for allows) and the rules.
Grant = tuple[str, list[Rule]]


class Authorizer:
    """Privileged groups first, then RBAC; `policy` is asked for the current Policy and its generation."""

    def __init__(self, policy: Callable[[], tuple[int, Policy]]) -> None:
        self._policy = policy
        self._generation = -1
        self._cache: dict[tuple[str, tuple[str, ...], str], list[Grant]] = {}

    def policy(self) -> Policy:
        return self._policy()[1]

    def generation(self) -> int:
        """Moves with every change to a role or binding: decisions made before it may no longer hold."""
        return self._policy()[0]

    def _grants(self, user: UserInfo, namespace: str) -> list[Grant]:
        generation, policy = self._policy()
        if generation != self._generation:
            self._cache.clear()
            self._generation = generation
        key = (user.username, user.groups, namespace)
        grants = self._cache.get(key)
        if grants is None:
            grants = list(_grants(policy, user, namespace))
            if len(self._cache) >= MAX_CACHED_SUBJECTS:
                self._cache.clear()
            self._cache[key] = grants
        return grants

    def authorize(self, attributes: Attributes) -> Decision:
        if SYSTEM_MASTERS in attributes.user.groups:
            return Decision(True)
        scopes = [""] if not attributes.namespace else ["", attributes.namespace]
        for scope in scopes:
            for reason, rules in self._grants(attributes.user, scope):
                if any(rule_allows(attributes, rule) for rule in rules):
                    return Decision(True, f"RBAC: allowed by {reason}")
        return Decision(False)

    def rules_for(self, user: UserInfo, namespace: str) -> list[Rule]:
        """Every rule that applies to `user` in `namespace` (cluster-wide ones included), as SelfSubjectRulesReview."""
        if SYSTEM_MASTERS in user.groups:
            return [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]
        rules: list[Rule] = []
        for scope in ["", namespace] if namespace else [""]:
            for _, granted in self._grants(user, scope):
                rules.extend(granted)
        return rules


def _grants(policy: Policy, user: UserInfo, namespace: str) -> Iterator[Grant]:
    """Cluster role bindings when `namespace` is empty, else the role bindings of that namespace."""
    bindings = policy.role_bindings.get(namespace, []) if namespace else policy.cluster_role_bindings
    for binding in bindings:
        for subject in binding.subjects:
            if applies_to(user, subject, binding.namespace):
                yield binding.describe(subject), policy.role_rules(binding)
                break
