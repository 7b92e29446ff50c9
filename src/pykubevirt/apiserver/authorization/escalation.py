"""RBAC writes that cannot grant more than the writer holds, and bindings whose roleRef is valid and fixed.

As kube-apiserver's RBAC registry: a Role or ClusterRole is stored only if its writer already holds every rule in
it (in the role's namespace) or may `escalate` roles; a binding only if its writer holds the referenced role's
rules or may `bind` that role (validation.ConfirmNoEscalation, rbac/rolebinding/policybased).
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.apiserver.authorization.attributes import Attributes
from pykubevirt.apiserver.authorization.rbac import RBAC_GROUP, SYSTEM_MASTERS, Authorizer, Rule
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Resource

ROLE_KINDS = {"Role": "roles", "ClusterRole": "clusterroles"}
BINDING_KINDS = ("RoleBinding", "ClusterRoleBinding")


def _list(rule: Rule, key: str) -> list[str]:
    values = rule.get(key) or []
    return [str(v) for v in values] if isinstance(values, list) else []


def _covers_all(owner: list[str], wanted: list[str]) -> bool:
    return "*" in owner or all(w in owner for w in wanted)


def _resources_covered(owner: list[str], wanted: list[str]) -> bool:
    """validation.resourceCoversAll: `*`, the exact resource, or `*/sub` for a subresource."""
    if "*" in owner:
        return True
    for path in wanted:
        if path in owner:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in owner:
            return False
    return True


def _url_covered(owner: list[str], url: str) -> bool:
    return any(o == "*" or o == url or (o.endswith("*") and url.startswith(o[:-1])) for o in owner)


def rule_covers(owner: Rule, wanted: Rule) -> bool:
    """validation.ruleCovers: does `owner` grant everything `wanted` grants?"""
    if not _covers_all(_list(owner, "verbs"), _list(wanted, "verbs")):
        return False
    urls = _list(wanted, "nonResourceURLs")
    if urls:
        return all(_url_covered(_list(owner, "nonResourceURLs"), u) for u in urls)
    owner_names = _list(owner, "resourceNames")
    wanted_names = _list(wanted, "resourceNames")
    return (
        _covers_all(_list(owner, "apiGroups"), _list(wanted, "apiGroups"))
        and _resources_covered(_list(owner, "resources"), _list(wanted, "resources"))
        and (not owner_names or (bool(wanted_names) and all(n in owner_names for n in wanted_names)))
    )


def breakdown(rule: Rule) -> list[Rule]:
    """validation.BreakdownRule: one rule per (group, resource, verb, name), or per (url, verb)."""
    verbs = _list(rule, "verbs")
    atoms: list[Rule] = []
    for group in _list(rule, "apiGroups"):
        for resource in _list(rule, "resources"):
            for verb in verbs:
                names = _list(rule, "resourceNames")
                for name in names or [""]:
                    atom: Rule = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                    if name:
                        atom["resourceNames"] = [name]
                    atoms.append(atom)
    for url in _list(rule, "nonResourceURLs"):
        for verb in verbs:
            atoms.append({"nonResourceURLs": [url], "verbs": [verb]})
    return atoms


def uncovered(owner: list[Rule], wanted: list[Rule]) -> list[Rule]:
    """The atomic rules of `wanted` no rule of `owner` covers."""
    return [atom for rule in wanted for atom in breakdown(rule) if not any(rule_covers(o, atom) for o in owner)]


def _go_strings(values: list[str]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def compact(rule: Rule) -> str:
    """rbacv1helpers.CompactString: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`."""
    parts = []
    for key, label in (
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ):
        if rule.get(key):
            parts.append(f"{label}:{_go_strings(_list(rule, key))}")
    return "{" + ", ".join(parts) + "}"


class RBACAdmission:
    """Validates writes of the four RBAC kinds: roleRef rules, and no escalation beyond the writer's own rights."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def handles(self, resource: Resource) -> bool:
        return resource.group == RBAC_GROUP

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        return obj

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        if operation not in ("CREATE", "UPDATE"):
            return []
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        namespace = str(meta.get("namespace") or "")
        if resource.kind in BINDING_KINDS:
            self._validate_role_ref(resource, obj, old, name)
        if SYSTEM_MASTERS in ctx.user.groups:
            return []
        if resource.kind in ROLE_KINDS:
            rules = [r for r in obj.get("rules") or [] if isinstance(r, dict)]
            if not self._may(ctx.user, "escalate", ROLE_KINDS[resource.kind], namespace, name):
                self._confirm(resource, ctx.user, namespace, name, rules)
        elif resource.kind in BINDING_KINDS:
            ref = obj.get("roleRef") or {}
            ref_kind, ref_name = str(ref.get("kind", "")), str(ref.get("name", ""))
            if not self._may(ctx.user, "bind", ROLE_KINDS.get(ref_kind, ""), namespace, ref_name):
                policy = self.authorizer.policy()
                if ref_kind == "ClusterRole":
                    rules = policy.cluster_roles.get(ref_name, [])
                else:
                    rules = policy.roles.get((namespace, ref_name), [])
                self._confirm(resource, ctx.user, namespace, name, rules)
        return []

    def _may(self, user: UserInfo, verb: str, plural: str, namespace: str, name: str) -> bool:
        attributes = Attributes(user, verb, True, namespace=namespace, api_group=RBAC_GROUP, resource=plural, name=name)
        return self.authorizer.authorize(attributes).allowed

    def _confirm(self, resource: Resource, user: UserInfo, namespace: str, name: str, rules: list[Rule]) -> None:
        missing = uncovered(self.authorizer.rules_for(user, namespace), rules)
        if not missing:
            return
        groups = _go_strings(list(user.groups))
        detail = (
            f'user "{user.username}" (groups={groups}) is attempting to grant RBAC permissions not currently held:\n'
            + "\n".join(compact(r) for r in missing)
        )
        raise errors.forbidden(
            f'{resource.plural}.{RBAC_GROUP} "{name}" is forbidden: {detail}',
            plural=resource.plural,
            group=RBAC_GROUP,
            name=name,
        )

    @staticmethod
    def _validate_role_ref(resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None, name: str) -> None:
        ref = obj.get("roleRef")
        allowed = ("ClusterRole",) if resource.kind == "ClusterRoleBinding" else ("Role", "ClusterRole")
        if not isinstance(ref, dict) or not ref.get("name"):
            raise errors.invalid_field(
                resource.kind, RBAC_GROUP, name, "roleRef.name", "Required value", "FieldValueRequired"
            )
        if ref.get("kind") not in allowed:
            supported = ", ".join(f'"{k}"' for k in allowed)
            raise errors.invalid_field(
                resource.kind,
                RBAC_GROUP,
                name,
                "roleRef.kind",
                f'Unsupported value: "{ref.get("kind")}": supported values: {supported}',
                "FieldValueNotSupported",
            )
        if ref.get("apiGroup") not in (None, "", RBAC_GROUP):
            raise errors.invalid_field(
                resource.kind,
                RBAC_GROUP,
                name,
                "roleRef.apiGroup",
                f'Unsupported value: "{ref.get("apiGroup")}": supported values: "{RBAC_GROUP}"',
                "FieldValueNotSupported",
            )
        if old is not None and (old.get("roleRef") or {}) != ref:
            raise errors.invalid_field(
                resource.kind, RBAC_GROUP, name, "roleRef", f"Invalid value: {ref}: cannot change roleRef"
            )
