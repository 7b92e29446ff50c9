"""Every namespace's default ServiceAccount and `kube-root-ca.crt` ConfigMap (kube's serviceaccounts-controller and
root-ca-cert-publisher), and the ServiceAccount admission plugin that mounts them into pods, through kubectl."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.integration.conftest import Kubectl, unique
from tests.support.waiting import eventually_sync

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def get(k: Kubectl, ns: str, *args: str) -> dict[str, Any] | None:
    result = k("get", "-n", ns, *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def filled(k: Kubectl, ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The namespace's default account and CA ConfigMap, once both are there."""

    def both() -> tuple[dict[str, Any], dict[str, Any]] | None:
        account, root_ca = get(k, ns, "sa", "default"), get(k, ns, "cm", "kube-root-ca.crt")
        return (account, root_ca) if account and root_ca else None

    return eventually_sync(both, timeout=10)


def pod(name: str, **spec: Any) -> str:
    body = {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body})


def token_mounts(k: Kubectl, ns: str, name: str) -> tuple[list[str], list[str]]:
    """The pod's kube-api-access volumes, and the volume each container mounts at the token directory."""
    spec = json.loads(k("get", "pod", name, "-n", ns, "-o", "json").stdout)["spec"]
    volumes = [v["name"] for v in spec.get("volumes") or [] if v["name"].startswith("kube-api-access-")]
    mounted = [
        next((m["name"] for m in c.get("volumeMounts") or [] if m["mountPath"] == TOKEN_DIR), "")
        for c in (spec.get("initContainers") or []) + spec["containers"]
    ]
    return volumes, mounted


def test_a_new_namespace_gets_its_default_account_and_the_cluster_ca(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    account, root_ca = filled(k, ns)
    assert set(account) == {"apiVersion", "kind", "metadata"}
    ca = base64.b64decode(
        k("config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}").stdout
    ).decode()
    assert root_ca["data"] == {"ca.crt": ca}
    assert root_ca["metadata"]["annotations"]["kubernetes.io/description"].startswith(
        "Contains a CA bundle that can be used to verify the kube-apiserver"
    )
    assert [line.split()[0] for line in k("get", "sa", "-n", ns).stdout.splitlines()] == ["NAME", "default"]


def test_both_come_back_when_deleted_and_the_ca_when_changed(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    account, root_ca = filled(k, ns)
    k("delete", "sa", "default", "-n", ns)
    k("delete", "cm", "kube-root-ca.crt", "-n", ns)
    again, _ = filled(k, ns)
    assert again["metadata"]["uid"] != account["metadata"]["uid"]
    k("patch", "cm", "kube-root-ca.crt", "-n", ns, "--type=merge", "-p", '{"data": {"ca.crt": "mine"}}')

    def restored() -> bool:
        current = get(k, ns, "cm", "kube-root-ca.crt")
        return current is not None and current["data"] == root_ca["data"]

    eventually_sync(restored, timeout=10)


def test_a_namespace_goes_whole_with_its_account_and_ca(kubectl_cli: Kubectl) -> None:
    k, ns = kubectl_cli, unique("gone")
    k("create", "namespace", ns)
    filled(k, ns)
    # kubectl waits until the namespace is gone: the controller that keeps its account and ConfigMap does not hold
    # its deletion back.
    k("delete", "namespace", ns, "--timeout=30s")
    assert k("get", "namespace", ns, check=False).returncode == 1


def test_a_pods_containers_get_the_token_volume_unless_the_pod_or_its_account_opts_out(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    filled(k, ns)
    k("create", "-n", ns, "-f", "-", stdin=pod("plain", initContainers=[{"name": "setup", "image": "busybox:1.36"}]))
    spec = json.loads(k("get", "pod", "plain", "-n", ns, "-o", "json").stdout)["spec"]
    assert (spec["serviceAccountName"], spec["serviceAccount"]) == ("default", "default")
    volumes, mounted = token_mounts(k, ns, "plain")
    assert len(volumes) == 1 and mounted == [volumes[0], volumes[0]]

    k("create", "-n", ns, "-f", "-", stdin=pod("opted-out", automountServiceAccountToken=False))
    assert token_mounts(k, ns, "opted-out") == ([], [""])

    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"}}
    k("create", "-n", ns, "-f", "-", stdin=json.dumps({**account, "automountServiceAccountToken": False}))
    k("create", "-n", ns, "-f", "-", stdin=pod("quiet", serviceAccountName="quiet"))
    assert token_mounts(k, ns, "quiet") == ([], [""])
    # The pod's own choice wins over its account's.
    k("create", "-n", ns, "-f", "-", stdin=pod("asks", serviceAccountName="quiet", automountServiceAccountToken=True))
    volumes, mounted = token_mounts(k, ns, "asks")
    assert len(volumes) == 1 and mounted == volumes

    # A container that mounts something of its own there keeps it.
    own = {"name": "main", "image": "busybox:1.36", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_DIR}]}
    k("create", "-n", ns, "-f", "-", stdin=pod("own", containers=[own], volumes=[{"name": "mine", "emptyDir": {}}]))
    assert token_mounts(k, ns, "own") == ([], ["mine"])


def test_a_pod_of_an_account_that_does_not_exist_is_forbidden(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    result = k("create", "-n", ns, "-f", "-", stdin=pod("orphan", serviceAccountName="nobody"), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f'Error from server (Forbidden): error when creating "STDIN": pods "orphan" is forbidden: '
        f'error looking up service account {ns}/nobody: serviceaccount "nobody" not found'
    )
    assert k("get", "pod", "orphan", "-n", ns, check=False).returncode == 1
    # A pod to be named by its generateName is named so, as virt-controller's launcher pods are in its events.
    unnamed = json.loads(pod("", serviceAccountName="nobody"))
    unnamed["metadata"] = {"generateName": "virt-launcher-vm-"}
    result = k("create", "-n", ns, "-f", "-", stdin=json.dumps(unnamed), check=False)
    assert 'pods "virt-launcher-vm-" is forbidden: error looking up service account' in result.stderr
