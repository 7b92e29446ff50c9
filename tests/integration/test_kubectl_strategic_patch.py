"""The real kubectl's strategic merge patches on built-in kinds: `kubectl apply` (client-side) and `kubectl patch`.

kubectl sends kube's directives ($setElementOrder, `$patch: delete` items, $deleteFromPrimitiveList, `$patch:
replace`); the object must end as kube-apiserver leaves it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import Kubectl

pytestmark = pytest.mark.kubectl


def get(k: Kubectl, ns: str, kind: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(k("get", kind, name, "-n", ns, "-o", "json").stdout)
    return out


def service(ports: list[tuple[str, int]]) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": n, "port": p} for n, p in ports]},
        }
    )


def test_kubectl_apply_moves_a_services_ports_as_kube_does(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    k("apply", "-n", ns, "-f", "-", stdin=service([("http", 80), ("https", 443)]))
    # Another writer's port, kept by apply's three-way patch since the last applied configuration never had it.
    k("patch", "svc", "web", "-n", ns, "-p", '{"spec":{"ports":[{"name":"metrics","port":9090}]}}')
    # 443 goes (a `$patch: delete` item), 8080 comes, and $setElementOrder/ports says 80 before 8080.
    k("apply", "-n", ns, "-f", "-", stdin=service([("http", 80), ("alt", 8080)]))

    ports = get(k, ns, "svc", "web")["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in ports] == [("metrics", 9090), ("http", 80), ("alt", 8080)]
    assert all(p["protocol"] == "TCP" and p["targetPort"] == p["port"] for p in ports)


def test_kubectl_patch_merges_finalizers_and_takes_kubes_directives(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    k("create", "configmap", "cfg", "-n", ns, "--from-literal=a=1")
    k("label", "cm", "cfg", "-n", ns, "x=1", "y=2")
    k("patch", "cm", "cfg", "-n", ns, "-p", '{"metadata":{"finalizers":["example.com/a"]}}')
    k("patch", "cm", "cfg", "-n", ns, "-p", '{"metadata":{"finalizers":["example.com/b"]}}')
    assert get(k, ns, "cm", "cfg")["metadata"]["finalizers"] == ["example.com/b", "example.com/a"]

    drop = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a", "example.com/b"]}}
    k("patch", "cm", "cfg", "-n", ns, "-p", json.dumps(drop))
    k("patch", "cm", "cfg", "-n", ns, "-p", '{"metadata":{"labels":{"$patch":"replace","z":"3"}}}')
    cm = get(k, ns, "cm", "cfg")
    assert "finalizers" not in cm["metadata"]
    assert cm["metadata"]["labels"] == {"z": "3"}

    refused = k("patch", "cm", "cfg", "-n", ns, "-p", '{"metadata":{"labels":{"$patch":"merge"}}}', check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "Error from server (BadRequest): unknown patch type: merge in map: map[$patch:merge]"
    )
    k("delete", "cm", "cfg", "-n", ns, "--wait=false")
