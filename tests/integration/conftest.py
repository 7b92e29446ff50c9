"""Fixtures of the API server's integration tests: an HTTPS client on the session server and a namespace per test."""

from __future__ import annotations

import copy
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.http_client import APIClient
from tests.support.waiting import eventually

# The real kubectl on the session server: kubectl_cli("get", "pods", stdin=..., check=False).
Kubectl = Callable[..., subprocess.CompletedProcess[str]]

VM_API = "/apis/kubevirt.io/v1"
# Every namespace holds the cluster CA's ConfigMap (kube's root-ca-cert-publisher): a list of a test's own ConfigMaps
# leaves it out with this field selector.
NOT_ROOT_CA = "metadata.name!=kube-root-ca.crt"

_VM_TEMPLATE: dict[str, Any] = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {"name": ""},
    "spec": {
        "runStrategy": "Halted",
        "template": {
            "spec": {
                "domain": {
                    "memory": {"guest": "128Mi"},
                    "devices": {"disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}]},
                },
                "volumes": [{"name": "rootdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}}],
            }
        },
    },
}


def vm_manifest(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    """A small valid VirtualMachine (Halted, so nothing would start it)."""
    vm = copy.deepcopy(_VM_TEMPLATE)
    vm["metadata"]["name"] = name
    if namespace:
        vm["metadata"]["namespace"] = namespace
    if labels:
        vm["metadata"]["labels"] = dict(labels)
    return vm


def vmi_manifest(name: str, namespace: str | None = None) -> dict[str, Any]:
    """A small valid VirtualMachineInstance."""
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": copy.deepcopy(_VM_TEMPLATE["spec"]["template"]["spec"]),
    }
    if namespace:
        vmi["metadata"]["namespace"] = namespace
    return vmi


def configmap(name: str, **labels: str) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}
    if labels:
        body["metadata"]["labels"] = dict(labels)
    return body


def pod_manifest(name: str, node: str | None = None, **labels: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher"}]},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def custom_resource_definition(
    group: str,
    kind: str,
    schema: dict[str, Any],
    *,
    short_names: list[str] | None = None,
    printer_columns: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A namespaced CRD of `kind` in `group`, served and stored as v1 with `schema`."""
    names: dict[str, Any] = {"plural": f"{kind.lower()}s", "singular": kind.lower(), "kind": kind}
    if short_names:
        names["shortNames"] = short_names
    version: dict[str, Any] = {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    if printer_columns:
        version["additionalPrinterColumns"] = printer_columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names['plural']}.{group}"},
        "spec": {"group": group, "scope": "Namespaced", "names": names, "versions": [version]},
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def api(apiserver: APIServerProcess) -> AsyncIterator[APIClient]:
    async with APIClient(apiserver) as client:
        yield client


@pytest.fixture
async def namespace(api: APIClient) -> str:
    """A namespace of the test's own on the session server, once kube's controllers have filled it (its default
    ServiceAccount and CA ConfigMap), so that a test's watches see its own objects only."""
    name = unique("t")
    reply = await api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert reply.status == 201, reply.body
    await namespace_filled(api, name)
    return name


async def namespace_filled(api: APIClient, name: str) -> None:
    """Wait for the objects kube's controllers put in every namespace."""

    async def filled() -> bool:
        account = await api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
        root_ca = await api.get(f"/api/v1/namespaces/{name}/configmaps/kube-root-ca.crt")
        return account.status == root_ca.status == 200

    await eventually(filled, timeout=10)


@pytest.fixture(scope="module")
def kubectl_cli(apiserver: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl with one HOME for the module, so its discovery cache is filled once, as for a user."""
    home: Path = tmp_path_factory.mktemp("kubectl-home")

    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl(apiserver, home, *args, stdin=stdin, check=check)

    return run


@pytest.fixture
def kubectl_namespace(kubectl_cli: Kubectl) -> str:
    """A namespace of the test's own, made with kubectl."""
    name = unique("kc")
    kubectl_cli("create", "namespace", name)
    return name
