"""deploy/'s virt-api on `pykubevirt apiserver --plain`, run by the cluster-mode harness as a cluster would run it:
KubeVirt's admission reaches virt-api only through its webhook configurations, and virtctl reaches
subresources.kubevirt.io only through the APIService, with virt-api under its manifests' own RBAC."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pykubevirt.apiserver.security import service_account_groups, write_user_kubeconfig
from pykubevirt.controller.kubevirt_certificates import CertificateIssuer
from tests.integration.conftest import vm_manifest, vmi_manifest
from tests.paths import REPO
from tests.support.apiserver_process import APIServerProcess, kubectl, kubectl_env
from tests.support.cluster_mode import ClusterMode
from tests.support.control_plane import client_for

VIRTCTL = str(Path(sys.executable).parent / "virtctl")
CONTROLLER_SA = "system:serviceaccount:kubevirt:kubevirt-controller"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kubectl-home")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, home: Path) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path_factory.mktemp("cluster-mode") / "apiserver", "--plain").start()
    kubectl(server, home, "apply", "-f", str(REPO / "deploy" / "crds"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(plain: APIServerProcess, home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterMode]:
    harness = ClusterMode(plain, home, tmp_path_factory.mktemp("pods"))
    manifests = harness.apply(REPO / "deploy")
    # virt-api serves the certificate virt-controller's leader issues; only virt-api runs here, so issue it once.
    asyncio.run(issue_certificates(plain))
    try:
        for workload in manifests:
            if workload["kind"] == "Deployment" and workload["metadata"]["name"] == "virt-api":
                harness.start_workload(workload)
        kubectl(
            plain, home, "wait", "--for=condition=Available", "apiservice/v1.subresources.kubevirt.io", "--timeout=60s"
        )
        yield harness
    finally:
        harness.stop()


async def issue_certificates(server: APIServerProcess) -> None:
    admin = client_for(server)
    try:
        await CertificateIssuer(admin, "kubevirt").ensure()
    finally:
        await admin.close()


def _create(plain: APIServerProcess, home: Path, obj: dict, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return kubectl(plain, home, "create", "-f", "-", stdin=json.dumps(obj), check=check)


def test_the_vm_validator_webhook_denies_through_the_configuration(
    cluster: ClusterMode, plain: APIServerProcess, home: Path
) -> None:
    vm = vm_manifest("both", "default")
    vm["spec"]["running"] = True
    result = _create(plain, home, vm, check=False)
    assert result.returncode == 1
    # kubectl prints an Invalid status by its causes, as for KubeVirt's webhooks on a real cluster.
    assert result.stderr.strip() == (
        "The request is invalid: spec.running: Running and RunStrategy are mutually exclusive. "
        "Note that Running is deprecated, please use RunStrategy instead"
    )


def test_the_vmi_mutator_webhook_applies_kubevirts_defaults(
    cluster: ClusterMode, plain: APIServerProcess, home: Path
) -> None:
    _create(plain, home, vmi_manifest("defaults", "default"))
    vmi = json.loads(kubectl(plain, home, "get", "vmi", "defaults", "-o", "json").stdout)
    assert vmi["spec"]["domain"]["machine"] == {"type": "q35"}


def test_a_v1alpha3_vmi_goes_through_the_same_webhooks_and_is_stored_as_v1(
    cluster: ClusterMode, plain: APIServerProcess, home: Path
) -> None:
    old = {**vmi_manifest("old-style", "default"), "apiVersion": "kubevirt.io/v1alpha3"}
    created = _create(plain, home, old)
    assert "kubevirt.io/v1alpha3 is now deprecated" in created.stderr
    vmi = json.loads(kubectl(plain, home, "get", "vmi", "old-style", "-o", "json").stdout)
    assert vmi["apiVersion"] == "kubevirt.io/v1"
    assert vmi["spec"]["domain"]["machine"] == {"type": "q35"}
    bad = {**vm_manifest("old-both", "default"), "apiVersion": "kubevirt.io/v1alpha3"}
    bad["spec"]["running"] = True
    refused = _create(plain, home, bad, check=False)
    assert refused.returncode == 1
    assert "spec.running: Running and RunStrategy are mutually exclusive" in refused.stderr


def test_virtctl_start_and_stop_go_through_the_apiservice(
    cluster: ClusterMode, plain: APIServerProcess, home: Path
) -> None:
    _create(plain, home, vm_manifest("lifecycle", "default"))
    env = {**kubectl_env(plain, home), "PATH": os.environ.get("PATH", "")}

    def virtctl(*args: str) -> str:
        result = subprocess.run([VIRTCTL, *args], env=env, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def run_strategy() -> str:
        vm = yaml.safe_load(kubectl(plain, home, "get", "vm", "lifecycle", "-o", "yaml").stdout)
        return str(vm["spec"]["runStrategy"])

    assert "was scheduled to start" in virtctl("start", "lifecycle")
    assert run_strategy() == "Always"
    assert "was scheduled to stop" in virtctl("stop", "lifecycle")
    assert run_strategy() == "Halted"


def test_evicting_a_launcher_pod_marks_its_vmi_for_evacuation_through_virt_apis_webhook(
    cluster: ClusterMode, plain: APIServerProcess, home: Path, tmp_path: Path
) -> None:
    vmi = vmi_manifest("evacuee", "default")
    vmi["spec"]["evictionStrategy"] = "LiveMigrate"
    _create(plain, home, vmi)
    # Only KubeVirt's service accounts write a VMI's status (virt-api's mutator keeps the old one for others).
    controller = write_user_kubeconfig(
        plain.data_dir, tmp_path / "controller.kubeconfig", CONTROLLER_SA, service_account_groups("kubevirt")
    )
    status = {"status": {"nodeName": "node-1", "conditions": [{"type": "LiveMigratable", "status": "True"}]}}
    kubectl(
        plain,
        home,
        "--kubeconfig",
        str(controller),
        "patch",
        "vmi",
        "evacuee",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "virt-launcher-evacuee-abcde",
            "namespace": "default",
            "labels": {"kubevirt.io": "virt-launcher"},
            "annotations": {"kubevirt.io/domain": "evacuee"},
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "compute", "image": "virt-launcher:latest"}]},
    }
    _create(plain, home, pod)
    kubectl(
        plain,
        home,
        "patch",
        "pod",
        pod["metadata"]["name"],
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": "Running"}}),
    )
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod["metadata"]["name"]}}
    path = f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/eviction"
    result = kubectl(plain, home, "create", "--raw", path, "-f", "-", stdin=json.dumps(eviction), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        # KubeVirt's denial carries code 429 and no reason, so kubectl names none.
        'Error from server: admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" '
        'denied the request: Eviction triggered evacuation of VMI "default/evacuee"'
    )
    marked = json.loads(kubectl(plain, home, "get", "vmi", "evacuee", "-o", "json").stdout)
    assert marked["status"]["evacuationNodeName"] == "node-1"
    kubectl(plain, home, "get", "pod", pod["metadata"]["name"])
