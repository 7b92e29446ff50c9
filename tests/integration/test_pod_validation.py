"""Pods as kube-apiserver validates them, through the real kubectl: the checks a hand-written pod most often fails,
and a pod's spec fixed after creation but for its images, activeDeadlineSeconds and added tolerations."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import Kubectl

pytestmark = pytest.mark.kubectl

FORBIDDEN = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
    "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def pod(name: str, **spec: Any) -> str:
    body = {"containers": [{"name": "main", "image": "busybox:1", "env": [{"name": "A", "value": "1"}]}], **spec}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body})


def refused(k: Kubectl, *args: str, stdin: str | None = None) -> str:
    result = k(*args, stdin=stdin, check=False)
    assert result.returncode == 1, result.stdout
    return result.stderr


def test_a_pod_kube_would_refuse_is_refused_with_its_causes(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bad"},
        "spec": {
            "restartPolicy": "Sometimes",
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "data", "emptyDir": {}}],
            "containers": [
                {"name": "Main_1"},
                {
                    "name": "side",
                    "image": "x",
                    "volumeMounts": [{"name": "missing", "mountPath": "/m"}],
                    "resources": {"requests": {"cpu": "2", "memory": "-1Mi"}, "limits": {"cpu": "1000m"}},
                },
                {"name": "side", "image": "y", "ports": [{"containerPort": 70000, "protocol": "ICMP"}]},
            ],
        },
    }
    stderr = refused(k, "create", "-n", ns, "-f", "-", stdin=json.dumps(bad))
    for cause in (
        'spec.volumes[1].name: Duplicate value: "data"',
        'spec.containers[0].name: Invalid value: "Main_1": a lowercase RFC 1123 label must consist of',
        "spec.containers[0].image: Required value",
        'spec.containers[1].volumeMounts[0].name: Not found: "missing"',
        'spec.containers[1].resources.requests[memory]: Invalid value: "-1Mi": must be greater than or equal to 0',
        'spec.containers[1].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1',
        'spec.containers[2].name: Duplicate value: "side"',
        "spec.containers[2].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        'spec.containers[2].ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
    ):
        assert cause in stderr, (cause, stderr)
    empty = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"}, "spec": {"containers": []}}
    assert refused(k, "create", "-n", ns, "-f", "-", stdin=json.dumps(empty)).strip() == (
        'The Pod "empty" is invalid: spec.containers: Required value'
    )
    assert "No resources found" in k("get", "pods", "-n", ns).stderr


def test_a_pods_volumes_env_and_probes_are_checked_as_kube_checks_them(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    container = {
        "name": "main",
        "image": "busybox:1.36",
        "env": [
            {"name": "A=B"},
            {"name": "POD", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "livenessProbe": {"exec": {"command": ["true"]}, "httpGet": {"port": 80}},
        "readinessProbe": {"periodSeconds": -1, "tcpSocket": {"port": 8080}},
    }
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mixed"},
        "spec": {
            "volumes": [{"name": "both", "emptyDir": {}, "configMap": {"name": "c"}}, {"name": "s", "secret": {}}],
            "initContainers": [
                {"name": "setup", "image": "busybox:1.36", "startupProbe": {"exec": {"command": ["x"]}}}
            ],
            "containers": [container],
        },
    }
    stderr = refused(k, "create", "-n", ns, "-f", "-", stdin=json.dumps(bad))
    for cause in (
        "spec.volumes[0].configMap: Forbidden: may not specify more than 1 volume type",
        "spec.volumes[1].secret.secretName: Required value",
        "spec.initContainers[0].startupProbe: Forbidden: may not be set for init containers without "
        "restartPolicy=Always",
        'spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name must consist only of '
        "printable ASCII characters other than '='",
        'spec.containers[0].env[1].valueFrom: Invalid value: "": may not be specified when `value` is not empty',
        "spec.containers[0].livenessProbe.httpGet: Forbidden: may not specify more than 1 handler type",
        "spec.containers[0].readinessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
    ):
        assert cause in stderr, (cause, stderr)
    # Kube 1.32's relaxed names: anything printable but '='.
    fine = {**bad, "metadata": {"name": "fine"}}
    fine["spec"] = {"containers": [{**container, "env": [{"name": "1 odd.name"}]}]}
    fine["spec"]["containers"][0].pop("livenessProbe")
    fine["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8080}}
    k("create", "-n", ns, "-f", "-", stdin=json.dumps(fine))


def test_a_pods_spec_changes_only_where_kube_lets_it(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    tolerated = [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]
    k("apply", "-n", ns, "-f", "-", stdin=pod("web", tolerations=tolerated))
    # An image, a shorter deadline, a toleration's seconds and a new toleration: allowed.
    k("apply", "-n", ns, "-f", "-", stdin=pod("web", tolerations=tolerated).replace("busybox:1", "busybox:2"))
    k("patch", "pod", "web", "-n", ns, "-p", '{"spec":{"activeDeadlineSeconds":100}}')
    more = [{**tolerated[0], "tolerationSeconds": 9}, {"key": "b", "operator": "Exists"}]
    k("patch", "pod", "web", "-n", ns, "-p", json.dumps({"spec": {"tolerations": more}}))
    spec = json.loads(k("get", "pod", "web", "-n", ns, "-o", "json").stdout)["spec"]
    assert spec["containers"][0]["image"] == "busybox:2" and spec["activeDeadlineSeconds"] == 100
    # The patch replaced the list; kube's DefaultTolerationSeconds puts its two tolerations back after it.
    defaults = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]
    assert [t["key"] for t in spec["tolerations"]] == ["a", "b", *defaults]

    changed_env = pod("web", tolerations=more).replace("busybox:1", "busybox:2").replace('"1"', '"2"')
    stderr = refused(k, "apply", "-n", ns, "-f", "-", stdin=changed_env)
    assert FORBIDDEN in stderr and "spec.containers[0].env[0].value" in stderr
    assert refused(k, "patch", "pod", "web", "-n", ns, "-p", '{"spec":{"activeDeadlineSeconds":200}}').strip() == (
        'The Pod "web" is invalid: spec.activeDeadlineSeconds: Invalid value: 200: '
        "must be less than or equal to previous value"
    )
    # tolerations has no patch strategy: the patch's list replaces the stored one, dropping "a".
    assert refused(k, "patch", "pod", "web", "-n", ns, "-p", '{"spec":{"tolerations":[{"key":"c"}]}}').strip() == (
        'The Pod "web" is invalid: spec.tolerations: Forbidden: existing toleration can not be modified except its '
        "tolerationSeconds"
    )
    added = '{"spec":{"containers":[{"name":"main","image":"busybox:2"},{"name":"x","image":"y"}]}}'
    assert "spec.containers: Forbidden: pod updates may not add or remove containers" in refused(
        k, "patch", "pod", "web", "-n", ns, "-p", added
    )
    # Labels and annotations stay free, and a replace of the pod as read changes nothing it may not.
    k("label", "pod", "web", "-n", ns, "tier=front")
    k("replace", "-n", ns, "-f", "-", stdin=k("get", "pod", "web", "-n", ns, "-o", "json").stdout)


def test_a_pod_reads_back_with_kubes_defaults_and_keeps_them_through_updates(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    # Without the default account's token volume, which kube's ServiceAccount admission would add on create only,
    # so that the manifest as written could not replace the pod.
    manifest = pod("plain", volumes=[{"name": "scratch"}], automountServiceAccountToken=False)
    k("apply", "-n", ns, "-f", "-", stdin=manifest)
    spec = json.loads(k("get", "pod", "plain", "-n", ns, "-o", "json").stdout)["spec"]
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["schedulerName"]) == (
        "Always",
        "ClusterFirst",
        "default-scheduler",
    )
    assert (spec["terminationGracePeriodSeconds"], spec["serviceAccountName"], spec["priority"]) == (30, "default", 0)
    assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert spec["containers"][0]["terminationMessagePolicy"] == "File"
    assert spec["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    # The same manifest applied again, and a label: the defaults are no change kube would refuse.
    k("apply", "-n", ns, "-f", "-", stdin=manifest)
    k("label", "pod", "plain", "-n", ns, "tier=web")
    labeled = json.loads(k("get", "pod", "plain", "-n", ns, "-o", "json").stdout)
    assert labeled["metadata"]["labels"] == {"tier": "web"}
    k("replace", "-n", ns, "-f", "-", stdin=manifest)
