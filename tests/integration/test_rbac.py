"""Authorization by RBAC on the real server process: component identities, a namespaced `edit` user minted by
`pykubevirt kubeconfig`, and the real kubectl's `auth can-i`, `auth whoami` and `--as`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.apiserver.security import SCHEDULER_USER
from pykubevirt.cli.cluster_layout import ClusterLayout, pykubevirt_argv
from pykubevirt.cli.kubeconfig_command import write_node_kubeconfig
from pykubevirt.virtapi.identities import CONTROLLER_USER, HANDLER_USER, VIRT_API_USER
from tests.integration.conftest import unique, vm_manifest
from tests.support.apiserver_process import KUBECTL, APIServerProcess, kubectl_env
from tests.support.http_client import APIClient
from tests.support.waiting import eventually

pytestmark = pytest.mark.kubectl

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
VMS = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"
VMIS = "/apis/kubevirt.io/v1/virtualmachineinstances"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterLayout, APIServerProcess]]:
    """A server laid out as `pykubevirt up` lays it out, so `pykubevirt kubeconfig --data-dir` finds it."""
    layout = ClusterLayout(tmp_path_factory.mktemp("rbac"))
    server = APIServerProcess(layout.apiserver_dir).start()
    yield layout, server
    server.stop()


def _token(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


def _kubectl(
    server: APIServerProcess, home: Path, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = kubectl_env(server, home)
    env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [KUBECTL, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def _forbidden(user: str, verb: str, resource: str, group: str, namespace: str = "") -> str:
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {where}'


async def _status(server: APIServerProcess, token: str, method: str, path: str, body: Any = None) -> tuple[int, str]:
    async with APIClient(server, token) as client:
        reply = await client.request(method, path, body)
    return reply.status, reply.message


async def test_each_component_has_its_own_least_privilege_identity(
    cluster: tuple[ClusterLayout, APIServerProcess],
) -> None:
    layout, server = cluster
    handler = _token(layout.component_kubeconfig("virt-handler"))
    controller = _token(layout.component_kubeconfig("virt-controller"))
    scheduler = _token(layout.component_kubeconfig("scheduler"))
    virt_api = _token(layout.component_kubeconfig("virt-api"))
    node = _token(write_node_kubeconfig(layout, "node07"))

    # The handler reads VMIs and patches its node, but no Secret anywhere.
    assert (await _status(server, handler, "GET", VMIS))[0] == 200
    status, message = await _status(server, handler, "GET", "/api/v1/secrets")
    assert status == 403
    assert message == "secrets is forbidden: " + _forbidden(HANDLER_USER, "list", "secrets", "")
    status, message = await _status(server, handler, "GET", "/api/v1/namespaces/kubevirt/secrets/any")
    assert status == 403
    assert message == 'secrets "any" is forbidden: ' + _forbidden(HANDLER_USER, "get", "secrets", "", "kubevirt")
    status, message = await _status(server, handler, "GET", "/api/v1/namespaces/default/pods")
    assert (status, message) == (403, "pods is forbidden: " + _forbidden(HANDLER_USER, "list", "pods", "", "default"))

    # The scheduler may not delete CRDs; the controller may not grant itself more.
    status, message = await _status(server, scheduler, "DELETE", f"{CRDS}/virtualmachines.kubevirt.io")
    assert status == 403
    assert message.endswith(_forbidden(SCHEDULER_USER, "delete", "customresourcedefinitions", "apiextensions.k8s.io"))
    assert (await _status(server, scheduler, "GET", "/api/v1/nodes"))[0] == 200
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": unique("escalate")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": CONTROLLER_USER}],
    }
    status, message = await _status(
        server, controller, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding
    )
    assert status == 403, message
    assert (await _status(server, controller, "GET", "/api/v1/namespaces/kubevirt/secrets"))[0] == 200
    assert (await _status(server, controller, "GET", "/api/v1/namespaces/default/secrets"))[0] == 403

    # virt-api reads VMs and nodes; the node agent reads Secrets (for volumes) but writes no VM.
    assert (await _status(server, virt_api, "GET", "/api/v1/nodes/node07"))[0] == 404
    assert (await _status(server, virt_api, "GET", "/api/v1/namespaces/default/secrets"))[0] == 403
    assert (await _status(server, node, "GET", "/api/v1/namespaces/default/secrets"))[0] == 200
    status, message = await _status(server, node, "POST", VMS.format(ns="default"), vm_manifest("n"))
    assert status == 403
    assert message.endswith(_forbidden("system:node:node07", "create", "virtualmachines", "kubevirt.io", "default"))
    assert (await _status(server, _token(server.kubeconfig), "GET", "/api/v1/secrets"))[0] == 200
    assert VIRT_API_USER.endswith("kubevirt-apiserver")


def _mint(layout: ClusterLayout, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = pykubevirt_argv("kubeconfig", "--data-dir", str(layout.data_dir), "-o", str(out), *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)


async def test_a_namespaced_edit_user_and_kubectl_auth(
    cluster: tuple[ClusterLayout, APIServerProcess], tmp_path: Path
) -> None:
    layout, server = cluster
    home = tmp_path / "home"
    ns = unique("team")
    assert _kubectl(server, home, server.kubeconfig, "create", "namespace", ns).returncode == 0
    alice = tmp_path / "alice.kubeconfig"
    _mint(layout, alice, "--user", "alice", "--namespace", ns, "--role", "edit")

    def k(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return _kubectl(server, home, alice, *args, stdin=stdin)

    whoami = k("auth", "whoami")
    assert whoami.returncode == 0, whoami.stderr
    assert "Username    alice" in whoami.stdout
    assert "system:authenticated" in whoami.stdout

    for args, answer in [
        (("create", "virtualmachines"), "yes"),
        # CDI's roles aggregate into edit: DataVolumes (virtctl image-upload makes one), DataSources, upload tokens.
        (("create", "datavolumes.cdi.kubevirt.io"), "yes"),
        (("delete", "datasources.cdi.kubevirt.io"), "yes"),
        (("create", "uploadtokenrequests.upload.cdi.kubevirt.io"), "yes"),
        (("get", "pods", "--subresource=log"), "yes"),
        (("list", "secrets"), "yes"),
        (("create", "rolebindings"), "no"),
        (("create", "virtualmachines", "-n", "default"), "no"),
        (("delete", "customresourcedefinitions"), "no"),
    ]:
        result = k("auth", "can-i", *args)
        assert result.stdout.strip() == answer, (args, result.stdout, result.stderr)

    # KubeVirt's subresource API lists no `virtualmachines` for kubectl to map, so ask as virtctl's callers would.
    async with APIClient(server, _token(alice)) as client:
        for subresource, allowed in (("start", True), ("stop", True), ("migrate", False)):
            attributes = {"namespace": ns, "verb": "update", "group": "subresources.kubevirt.io"}
            attributes |= {"resource": "virtualmachines", "subresource": subresource, "name": "vm1"}
            review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"}
            review["spec"] = {"resourceAttributes": attributes}
            reply = await client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
            assert reply.status == 201, reply.body
            assert reply.body["status"]["allowed"] is allowed, subresource

    listing = k("auth", "can-i", "--list")
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line for line in listing.stdout.splitlines()[1:] if line and not line.startswith(" ")}
    assert "virtualmachines.kubevirt.io" in rows
    assert "create" in rows["virtualmachines.kubevirt.io"]

    vm = yaml.safe_dump(vm_manifest("vm1"))
    applied = k("create", "-f", "-", stdin=vm)
    assert applied.returncode == 0, applied.stderr
    denied = k("get", "pods", "-n", "default")
    assert denied.returncode == 1
    assert denied.stderr.strip() == (
        "Error from server (Forbidden): pods is forbidden: " + _forbidden("alice", "list", "pods", "", "default")
    )

    # Impersonation: alice may act as her namespace's service accounts (edit grants it), not as other users.
    as_bob = k("get", "virtualmachines", "--as=bob")
    assert as_bob.returncode == 1
    assert as_bob.stderr.strip() == (
        'Error from server (Forbidden): users "bob" is forbidden: ' + _forbidden("alice", "impersonate", "users", "")
    )
    as_sa = k("get", "virtualmachines", f"--as=system:serviceaccount:{ns}:builder")
    assert as_sa.returncode == 1
    sa_user = f"system:serviceaccount:{ns}:builder"
    assert f'User "{sa_user}" cannot list resource "virtualmachines"' in as_sa.stderr

    # The server remembers what it allowed only until a role or binding changes: without her binding, alice is
    # refused the very request she was just allowed (twice, so it was answered from memory the second time).
    for _ in range(2):
        assert k("get", "virtualmachines", "vm1").returncode == 0
    admin = _kubectl(server, home, server.kubeconfig, "delete", "rolebindings", "--all", "-n", ns)
    assert admin.returncode == 0, admin.stderr
    revoked = k("get", "virtualmachines", "vm1")
    assert revoked.returncode == 1
    assert _forbidden("alice", "get", "virtualmachines", "kubevirt.io", ns) in revoked.stderr


def test_admin_is_system_masters_and_kubectl_as_takes_the_impersonated_identity(
    cluster: tuple[ClusterLayout, APIServerProcess], tmp_path: Path
) -> None:
    _, server = cluster
    home = tmp_path / "home"
    whoami = _kubectl(server, home, server.kubeconfig, "auth", "whoami")
    assert "system:masters" in whoami.stdout, whoami.stderr
    assert _kubectl(server, home, server.kubeconfig, "auth", "can-i", "*", "*").stdout.strip() == "yes"
    nobody = _kubectl(server, home, server.kubeconfig, "get", "pods", "--as=nobody")
    assert nobody.returncode == 1
    assert nobody.stderr.strip() == (
        "Error from server (Forbidden): pods is forbidden: " + _forbidden("nobody", "list", "pods", "", "default")
    )
    as_nobody = _kubectl(server, home, server.kubeconfig, "auth", "whoami", "--as=nobody", "--as-group=team")
    assert "Username    nobody" in as_nobody.stdout, as_nobody.stderr
    assert "[team system:authenticated]" in as_nobody.stdout
    can = _kubectl(server, home, server.kubeconfig, "auth", "can-i", "list", "secrets", "--as", HANDLER_USER, "-A")
    assert can.stdout.strip() == "no"


async def test_subject_access_reviews_and_aggregation(cluster: tuple[ClusterLayout, APIServerProcess]) -> None:
    _, server = cluster
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": HANDLER_USER,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kubevirt"],
            "resourceAttributes": {"verb": "patch", "group": "kubevirt.io", "resource": "virtualmachineinstances"},
        },
    }
    async with APIClient(server) as admin:
        reply = await admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        assert reply.status == 201, reply.body
        assert reply.body["status"]["allowed"] is True
        assert reply.body["status"]["reason"].startswith('RBAC: allowed by ClusterRoleBinding "kubevirt-handler"')
        review["spec"]["resourceAttributes"] = {"verb": "get", "resource": "secrets", "namespace": "kubevirt"}
        reply = await admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        assert reply.body["status"] == {"allowed": False}

        # A role labelled aggregate-to-view reaches view, edit and admin.
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": unique("widgets"), "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}],
        }
        assert (await admin.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)).status == 201

        async def aggregated() -> bool:
            for name in ("view", "edit", "admin"):
                reply = await admin.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
                if role["rules"][0] not in reply.body.get("rules", []):
                    return False
            return True

        await eventually(aggregated)


def test_a_namespace_admin_cannot_grant_what_it_does_not_hold(
    cluster: tuple[ClusterLayout, APIServerProcess], tmp_path: Path
) -> None:
    layout, server = cluster
    home = tmp_path / "home"
    ns = unique("owned")
    assert _kubectl(server, home, server.kubeconfig, "create", "namespace", ns).returncode == 0
    carol = tmp_path / "carol.kubeconfig"
    _mint(layout, carol, "--user", "carol", "--namespace", ns, "--role", "admin")
    granted = _kubectl(server, home, carol, "create", "rolebinding", "dave-edit", "--clusterrole=edit", "--user=dave")
    assert granted.returncode == 0, granted.stderr
    escalated = _kubectl(server, home, carol, "create", "rolebinding", "dave-root", "--clusterrole=cluster-admin")
    assert escalated.returncode == 1
    assert escalated.stderr.startswith(
        'error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io "dave-root" is forbidden: '
        'user "carol" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}'
    ), escalated.stderr
    role = _kubectl(server, home, carol, "create", "role", "nodes", "--verb=get", "--resource=secrets")
    assert role.returncode == 0, role.stderr
    table = _kubectl(server, home, carol, "get", "rolebindings", "-o", "wide").stdout.splitlines()
    assert table[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert any(line.split()[:2] == ["dave-edit", "ClusterRole/edit"] and "dave" in line for line in table[1:])
    roles = _kubectl(server, home, server.kubeconfig, "get", "clusterrole", "view").stdout.splitlines()
    assert roles[0].split() == ["NAME", "CREATED", "AT"]
    assert roles[1].split()[1].endswith("Z")


def test_cloning_from_another_namespace_needs_the_right_to_there(
    cluster: tuple[ClusterLayout, APIServerProcess], tmp_path: Path
) -> None:
    """CDI's DataVolume webhook: `create datavolumes/source` (or pods) in the source namespace, as clone-sourcer
    grants; a clone within one's own namespace needs nothing more."""
    layout, server = cluster
    home = tmp_path / "home"
    ns, golden = unique("team"), unique("golden")
    for namespace in (ns, golden):
        assert _kubectl(server, home, server.kubeconfig, "create", "namespace", namespace).returncode == 0
    source = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": {"name": "fedora"}}
    source["spec"] = {"source": {"pvc": {"name": "fedora-disk", "namespace": golden}}}
    made = _kubectl(server, home, server.kubeconfig, "create", "-n", golden, "-f", "-", stdin=yaml.safe_dump(source))
    assert made.returncode == 0, made.stderr
    alice = tmp_path / "alice.kubeconfig"
    _mint(layout, alice, "--user", "alice", "--namespace", ns, "--role", "edit")

    def clone(name: str, source: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": name}}
        dv["spec"] = {**source, "storage": {"resources": {"requests": {"storage": "16Mi"}}}}
        return _kubectl(server, home, alice, "create", "-f", "-", stdin=yaml.safe_dump(dv))

    by_claim = {"source": {"pvc": {"namespace": golden, "name": "fedora-disk"}}}
    by_source = {"sourceRef": {"kind": "DataSource", "name": "fedora", "namespace": golden}}
    refusal = (
        'admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request:  '
        f"User alice has insufficient permissions in clone source namespace {golden}"
    )
    for name, how in (("by-claim", by_claim), ("by-source", by_source)):
        refused = clone(name, how)
        assert refused.returncode == 1
        assert refusal in refused.stderr, refused.stderr
    own = clone("own", {"source": {"pvc": {"namespace": ns, "name": "anything"}}})
    assert own.returncode == 0, own.stderr
    missing = clone("nowhere", {"source": {"pvc": {"namespace": "no-such-namespace", "name": "disk"}}})
    assert missing.returncode == 1
    assert 'denied the request: namespaces "no-such-namespace" not found' in missing.stderr

    # The golden namespace's admin lets alice clone from it.
    bound = _kubectl(
        server,
        home,
        server.kubeconfig,
        *("create", "rolebinding", "alice-clones", "-n", golden),
        *("--clusterrole=cdi.kubevirt.io:clone-sourcer", "--user=alice"),
    )
    assert bound.returncode == 0, bound.stderr
    for name, how in (("by-claim", by_claim), ("by-source", by_source)):
        allowed = clone(name, how)
        assert allowed.returncode == 0, allowed.stderr
