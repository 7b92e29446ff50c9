"""kube-apiserver's pod defaults, on plain data."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pykubevirt.api.pod_defaults import default_pull_policy, set_pod_defaults


def defaulted(spec: dict[str, Any]) -> dict[str, Any]:
    pod = {"spec": spec}
    set_pod_defaults(pod)
    return pod["spec"]


def test_a_bare_pod_gets_kubes_spec_and_container_defaults() -> None:
    spec = defaulted({"containers": [{"name": "c", "image": "busybox:1.36", "ports": [{"containerPort": 80}]}]})
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    assert (spec["serviceAccountName"], spec["serviceAccount"]) == ("default", "default")
    assert "priority" not in spec  # the Priority plugin's, which reads the classes (test_pod_priority)
    assert spec["tolerations"] == [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    container = spec["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert container["resources"] == {}
    assert container["ports"] == [{"containerPort": 80, "protocol": "TCP"}]


def test_what_the_pod_sets_stays_and_zero_values_count_as_set_where_go_keeps_them() -> None:
    spec = defaulted(
        {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "enableServiceLinks": False,
            "serviceAccountName": "builder",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "Never"}],
        }
    )
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["enableServiceLinks"] is False
    assert spec["serviceAccount"] == "builder"
    assert spec["tolerations"] == [{"operator": "Exists"}]  # tolerates every taint already
    assert spec["containers"][0]["imagePullPolicy"] == "Never"


def test_limits_become_requests_and_host_network_ports_their_host_ports() -> None:
    spec = defaulted(
        {
            "hostNetwork": True,
            "containers": [
                {
                    "name": "c",
                    "image": "x:1",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
                    "ports": [{"containerPort": 8080}],
                }
            ],
        }
    )
    container = spec["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert container["ports"] == [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]


def test_probes_volumes_and_field_references() -> None:
    spec = defaulted(
        {
            "containers": [
                {
                    "name": "c",
                    "image": "x:1",
                    "readinessProbe": {"httpGet": {"port": 80}},
                    "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                }
            ],
            "volumes": [
                {"name": "scratch"},
                {"name": "conf", "configMap": {"name": "c"}},
                {"name": "key", "secret": {"secretName": "s", "defaultMode": 256}},
                {"name": "host", "hostPath": {"path": "/srv"}},
            ],
        }
    )
    container = spec["containers"][0]
    assert container["readinessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert container["env"][0]["valueFrom"]["fieldRef"] == {"fieldPath": "metadata.name", "apiVersion": "v1"}
    assert spec["volumes"] == [
        {"name": "scratch", "emptyDir": {}},
        {"name": "conf", "configMap": {"name": "c", "defaultMode": 420}},
        {"name": "key", "secret": {"secretName": "s", "defaultMode": 256}},
        {"name": "host", "hostPath": {"path": "/srv", "type": ""}},
    ]


def test_defaults_twice_are_the_defaults_once() -> None:
    once = defaulted({"containers": [{"name": "c", "image": "x"}], "tolerations": []})
    assert defaulted(copy.deepcopy(once)) == once


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("registry:5000/busybox", "Always"),
        ("registry:5000/busybox:1.36", "IfNotPresent"),
        ("busybox@sha256:" + "0" * 64, "IfNotPresent"),
    ],
)
def test_image_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert default_pull_policy(image) == policy
