"""The RBAC authorizer on plain data: rule matching, bindings, aggregation, impersonation and the 403 text."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from pykubevirt.api import errors
from pykubevirt.apiserver.authorization.aggregation import aggregate
from pykubevirt.apiserver.authorization.attributes import Attributes, request_attributes
from pykubevirt.apiserver.authorization.bootstrap_roles import bootstrap_policy
from pykubevirt.apiserver.authorization.escalation import compact, uncovered
from pykubevirt.apiserver.authorization.forbidden import forbidden
from pykubevirt.apiserver.authorization.impersonation import impersonate
from pykubevirt.apiserver.authorization.rbac import Authorizer, Policy, rule_allows
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.apiserver.security import SCHEDULER_USER
from pykubevirt.virtapi.identities import CONTROLLER_USER, HANDLER_USER, VIRT_API_USER
from pykubevirt.virtapi.rbac_policy import kubevirt_policy

AUTHENTICATED = "system:authenticated"


def _user(name: str, *groups: str) -> UserInfo:
    if name.startswith("system:serviceaccount:"):
        namespace = name.split(":")[2]
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", *groups)
    return UserInfo(name, (*groups, AUTHENTICATED))


def _bootstrap_authorizer(*extra: dict[str, Any]) -> Authorizer:
    """The shipped policy with aggregated roles filled in, as the server runs it, plus `extra` objects."""
    objects = [*bootstrap_policy(), *kubevirt_policy(), *extra]
    kinds: dict[str, list[dict[str, Any]]] = {
        "ClusterRole": [],
        "Role": [],
        "ClusterRoleBinding": [],
        "RoleBinding": [],
    }
    for obj in objects:
        kinds[obj["kind"]].append(obj)
    filled = aggregate(kinds["ClusterRole"])
    cluster_roles = [dict(r, rules=filled.get(r["metadata"]["name"], r.get("rules"))) for r in kinds["ClusterRole"]]
    policy = Policy.from_objects(cluster_roles, kinds["Role"], kinds["ClusterRoleBinding"], kinds["RoleBinding"])
    return Authorizer(lambda: (0, policy))


EDIT_USER = _user("alice")
ALICE_EDIT = {
    "kind": "RoleBinding",
    "metadata": {"name": "alice-edit", "namespace": "team"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
    "subjects": [{"kind": "User", "name": "alice"}],
}
AUTHORIZER = _bootstrap_authorizer(ALICE_EDIT)


def _resource(user: UserInfo, verb: str, resource: str, namespace: str = "", **kw: str) -> Attributes:
    group = kw.pop("group", "")
    return Attributes(user, verb, True, namespace=namespace, api_group=group, resource=resource, **kw)


NODE = UserInfo("system:node:node01", ("system:nodes", AUTHENTICATED))
KV = "kubevirt.io"
IT = "instancetype.kubevirt.io"
SUB = "subresources.kubevirt.io"
# (who, verb, group, resource, subresource, namespace, name, allowed)
TABLE: list[tuple[UserInfo, str, str, str, str, str, str, bool]] = [
    # virt-handler: VMIs and its node, no Secrets anywhere, no CRD writes.
    (_user(HANDLER_USER), "watch", KV, "virtualmachineinstances", "", "", "", True),
    (_user(HANDLER_USER), "patch", KV, "virtualmachineinstances", "", "default", "vm1", True),
    (_user(HANDLER_USER), "patch", "", "nodes", "", "", "node01", True),
    (_user(HANDLER_USER), "list", "", "secrets", "", "", "", False),
    (_user(HANDLER_USER), "get", "", "secrets", "", "kubevirt", "any", False),
    (_user(HANDLER_USER), "delete", KV, "virtualmachineinstances", "", "default", "vm1", False),
    (_user(HANDLER_USER), "create", "", "pods", "", "default", "", False),
    # virt-controller: everything of kubevirt.io, launcher pods; Secrets only in its own namespace; no RBAC writes.
    (_user(CONTROLLER_USER), "create", KV, "virtualmachineinstances", "", "default", "", True),
    (_user(CONTROLLER_USER), "update", KV, "virtualmachines", "status", "default", "vm1", True),
    (_user(CONTROLLER_USER), "create", "", "pods", "", "default", "", True),
    (_user(CONTROLLER_USER), "update", "coordination.k8s.io", "leases", "", "kubevirt", "virt-controller", True),
    (_user(CONTROLLER_USER), "get", "", "secrets", "", "kubevirt", "x", True),
    (_user(CONTROLLER_USER), "get", "", "secrets", "", "default", "x", False),
    (_user(CONTROLLER_USER), "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", "", False),
    # the scheduler binds pods and may not touch CRDs.
    (_user(SCHEDULER_USER), "create", "", "pods", "binding", "default", "p", True),
    (_user(SCHEDULER_USER), "watch", "", "nodes", "", "", "", True),
    (_user(SCHEDULER_USER), "delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "", "x", False),
    # virt-api: reads VMs, patches them, reads nodes; cannot create pods.
    (_user(VIRT_API_USER), "patch", KV, "virtualmachines", "status", "default", "vm1", True),
    (_user(VIRT_API_USER), "get", "", "nodes", "", "", "node01", True),
    (_user(VIRT_API_USER), "create", "", "pods", "", "default", "", False),
    # a node agent: pods, its node, Secrets for volumes.
    (NODE, "patch", "", "pods", "status", "ns", "p", True),
    (NODE, "create", "", "nodes", "", "", "", True),
    (NODE, "create", KV, "virtualmachines", "", "x", "", False),
    # an `edit` user of namespace team: VMs, their start/stop, pods/log, Secrets; not RBAC, not other namespaces.
    (EDIT_USER, "create", KV, "virtualmachines", "", "team", "", True),
    (EDIT_USER, "update", SUB, "virtualmachines", "start", "team", "vm1", True),
    (EDIT_USER, "get", SUB, "virtualmachineinstances", "console", "team", "vm1", True),
    (EDIT_USER, "get", "", "pods", "log", "team", "p", True),
    (EDIT_USER, "list", "", "secrets", "", "team", "", True),
    (EDIT_USER, "create", "rbac.authorization.k8s.io", "rolebindings", "", "team", "", False),
    (EDIT_USER, "update", SUB, "virtualmachines", "migrate", "team", "vm1", False),
    (EDIT_USER, "create", KV, "virtualmachines", "", "default", "", False),
    (EDIT_USER, "list", KV, "virtualmachines", "", "", "", False),
    (EDIT_USER, "impersonate", "", "serviceaccounts", "", "team", "builder", True),
    (EDIT_USER, "impersonate", "", "users", "", "", "bob", False),
    # every authenticated user: its own reviews and cluster instancetypes; system:masters: anything.
    (_user("nobody"), "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", "", True),
    (_user("nobody"), "list", IT, "virtualmachineclusterinstancetypes", "", "", "", True),
    (_user("nobody"), "list", "", "pods", "", "default", "", False),
    (UserInfo("kubernetes-admin", ("system:masters",)), "delete", "", "namespaces", "", "", "kube-system", True),
]  # fmt: skip


@pytest.mark.parametrize(("user", "verb", "group", "resource", "sub", "namespace", "name", "allowed"), TABLE)
def test_rbac_table(
    user: UserInfo, verb: str, group: str, resource: str, sub: str, namespace: str, name: str, allowed: bool
) -> None:
    attributes = _resource(user, verb, resource, namespace, group=group, subresource=sub, name=name)
    assert AUTHORIZER.authorize(attributes).allowed is allowed


def test_non_resource_urls_of_discovery() -> None:
    user = _user("nobody")
    assert AUTHORIZER.authorize(Attributes(user, "get", False, path="/apis/kubevirt.io/v1")).allowed
    assert AUTHORIZER.authorize(Attributes(user, "get", False, path="/openapi/v3")).allowed
    assert not AUTHORIZER.authorize(Attributes(user, "get", False, path="/debug/writes")).allowed


def test_rule_matching_wildcards_subresources_and_names() -> None:
    def allows(rule: dict[str, Any], **kw: str) -> bool:
        return rule_allows(_resource(EDIT_USER, kw.pop("verb", "get"), kw.pop("resource"), **kw), rule)

    scale = {"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["*"]}
    assert allows(scale, resource="deployments", subresource="scale", group="apps")
    assert not allows(scale, resource="deployments", group="apps")
    log = {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}
    assert allows(log, resource="pods", subresource="log")
    assert not allows(log, resource="pods")
    named = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]}
    assert allows(named, resource="configmaps", name="a")
    assert not allows(named, resource="configmaps", name="b")
    assert not allows(named, resource="configmaps", verb="list")
    prefix = {"nonResourceURLs": ["/healthz/*"], "verbs": ["get"]}
    assert rule_allows(Attributes(EDIT_USER, "get", False, path="/healthz/etcd"), prefix)
    assert not rule_allows(Attributes(EDIT_USER, "get", False, path="/healthz"), prefix)


def test_role_binding_to_a_namespaced_role_and_service_account_subjects() -> None:
    role = {"kind": "Role", "metadata": {"name": "reader", "namespace": "ns"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}  # fmt: skip
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "b", "namespace": "ns"},
        "roleRef": {"kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "app"}],
    }
    authorizer = _bootstrap_authorizer(role, binding)
    app = _user("system:serviceaccount:ns:app")
    assert authorizer.authorize(_resource(app, "get", "configmaps", "ns")).allowed
    assert not authorizer.authorize(_resource(app, "get", "configmaps", "other")).allowed
    assert not authorizer.authorize(
        _resource(_user("system:serviceaccount:other:app"), "get", "configmaps", "ns")
    ).allowed
    decision = authorizer.authorize(_resource(app, "get", "configmaps", "ns"))
    assert decision.reason == 'RBAC: allowed by RoleBinding "ns/b" of Role "reader" to ServiceAccount "ns/app"'


def test_aggregation_reaches_admin_through_view_and_edit() -> None:
    roles = [r for r in (*bootstrap_policy(), *kubevirt_policy()) if r["kind"] == "ClusterRole"]
    filled = aggregate(roles)
    vm_read = {"apiGroups": [KV], "resources": ["virtualmachines", "virtualmachineinstances",
               "virtualmachineinstancepresets", "virtualmachineinstancereplicasets",
               "virtualmachineinstancemigrations"], "verbs": ["get", "list", "watch"]}  # fmt: skip
    assert vm_read in filled["view"]
    assert vm_read in filled["edit"] and vm_read in filled["admin"]
    assert not any("rolebindings" in (r.get("resources") or []) for r in filled["edit"])
    assert any("rolebindings" in (r.get("resources") or []) for r in filled["admin"])


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/default/pods", {}, ("list", "default", "", "pods", "", "")),
        ("GET", "/api/v1/pods", {"watch": "1"}, ("watch", "", "", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"fieldSelector": "metadata.name=p"},
         ("list", "ns", "", "pods", "", "p")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, ("get", "ns", "", "pods", "log", "p")),
        ("DELETE", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines", {},
         ("deletecollection", "ns", "kubevirt.io", "virtualmachines", "", "")),
        ("PUT", "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/start", {},
         ("update", "ns", SUB, "virtualmachines", "start", "vm")),
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "ns", "", "namespaces", "", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "ns", "", "namespaces", "finalize", "ns")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "ns", "", "pods", "", "")),
    ],
)  # fmt: skip
def test_request_attributes_follow_request_info(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    a = request_attributes(EDIT_USER, method, path, query)
    assert a.resource_request
    assert (a.verb, a.namespace, a.api_group, a.resource, a.subresource, a.name) == expected


def test_discovery_paths_are_non_resource_requests() -> None:
    for path in ("/api", "/api/v1", "/apis", "/apis/kubevirt.io", "/apis/kubevirt.io/v1", "/version", "/openapi/v2"):
        assert not request_attributes(EDIT_USER, "GET", path, {}).resource_request


def test_forbidden_messages_are_kube_apiservers() -> None:
    handler = UserInfo("system:serviceaccount:kubevirt:virt-handler", ())
    error = forbidden(_resource(handler, "list", "pods", "default"))
    assert error.code == 403 and error.reason == "Forbidden"
    assert error.message == (
        'pods is forbidden: User "system:serviceaccount:kubevirt:virt-handler" cannot list resource "pods" '
        'in API group "" in the namespace "default"'
    )
    error = forbidden(_resource(handler, "get", "customresourcedefinitions", group="apiextensions.k8s.io", name="x"))
    assert error.message == (
        'customresourcedefinitions.apiextensions.k8s.io "x" is forbidden: User "system:serviceaccount:kubevirt:'
        'virt-handler" cannot get resource "customresourcedefinitions" in API group "apiextensions.k8s.io" '
        "at the cluster scope"
    )
    assert error.details == {"name": "x", "group": "apiextensions.k8s.io", "kind": "customresourcedefinitions"}
    sub = forbidden(_resource(handler, "get", "pods", "ns", subresource="log", name="p"))
    assert sub.message.endswith('cannot get resource "pods/log" in API group "" in the namespace "ns"')
    path = forbidden(Attributes(handler, "get", False, path="/debug/writes"))
    assert (
        path.message == 'forbidden: User "system:serviceaccount:kubevirt:virt-handler" cannot get path "/debug/writes"'
    )


def _headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def test_impersonation_needs_the_impersonate_verb() -> None:
    admin = UserInfo("kubernetes-admin", ("system:masters", AUTHENTICATED))
    as_nobody = impersonate(AUTHORIZER.authorize, _headers(("Impersonate-User", "nobody")), admin)
    assert as_nobody == UserInfo("nobody", (AUTHENTICATED,))
    with pytest.raises(errors.APIError) as denied:
        impersonate(AUTHORIZER.authorize, _headers(("Impersonate-User", "bob")), EDIT_USER)
    assert denied.value.code == 403
    assert denied.value.message == (
        'users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" '
        "at the cluster scope"
    )
    # edit grants impersonating the service accounts of its namespace, who then get their groups.
    sa = impersonate(
        AUTHORIZER.authorize, _headers(("Impersonate-User", "system:serviceaccount:team:builder")), EDIT_USER
    )
    assert sa.groups == ("system:serviceaccounts", "system:serviceaccounts:team", AUTHENTICATED)
    with pytest.raises(errors.APIError) as group_only:
        impersonate(AUTHORIZER.authorize, _headers(("Impersonate-Group", "g")), admin)
    assert group_only.value.code == 400
    assert impersonate(AUTHORIZER.authorize, _headers(), EDIT_USER) is EDIT_USER


def test_escalation_checks_cover_rules_atom_by_atom() -> None:
    owner = [
        {"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"], "verbs": ["*"]},
        {"nonResourceURLs": ["/healthz/*"], "verbs": ["get"]},
    ]
    assert uncovered(owner, [{"apiGroups": [""], "resources": ["pods", "nodes/status"], "verbs": ["list"]}]) == []
    assert uncovered(owner, [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}]) == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}
    ]
    named = {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]}
    assert uncovered(owner, [dict(named, resourceNames=["web"])]) == []
    assert uncovered(owner, [named]) == [named]
    assert uncovered(owner, [{"nonResourceURLs": ["/healthz/etcd"], "verbs": ["get"]}]) == []
    assert compact({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}) == (
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}'
    )
