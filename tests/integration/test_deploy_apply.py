"""deploy/README.md's install commands, run with the real kubectl against `pykubevirt apiserver --plain`.

The plain server serves only what kube-apiserver serves, so this is `kubectl apply -k deploy/` as a cluster
receives it: every object is accepted, the KubeVirt CR follows once its CRD is established, and the CDI variant
leaves the DataVolume CRD alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.deploy_manifests import DEPLOY, KUBEVIRT_CR, rendered

pytestmark = pytest.mark.kubectl


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path / "apiserver", "--plain").start()
    yield server
    server.stop()


def _names(server: APIServerProcess, home: Path, resource: str) -> set[str]:
    listed = json.loads(kubectl(server, home, "get", resource, "-A", "-o", "json").stdout)
    return {item["metadata"]["name"] for item in listed["items"]}


def test_apply_installs_everything_and_then_the_kubevirt_cr(plain: APIServerProcess, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    kubectl(plain, home, "apply", "-k", str(DEPLOY))
    kubectl(plain, home, "wait", "--for=condition=Established", "crd/kubevirts.kubevirt.io", "--timeout=30s")
    kubectl(plain, home, "apply", "-f", str(KUBEVIRT_CR))
    for kind, resource in (
        ("CustomResourceDefinition", "customresourcedefinitions"),
        ("ServiceAccount", "serviceaccounts"),
        ("ClusterRole", "clusterroles"),
        ("Deployment", "deployments"),
        ("DaemonSet", "daemonsets"),
    ):
        expected = {o["metadata"]["name"] for o in rendered() if o["kind"] == kind}
        assert expected <= _names(plain, home, resource), kind
    kubevirt = json.loads(kubectl(plain, home, "get", "kubevirt", "-n", "kubevirt", "kubevirt", "-o", "json").stdout)
    assert kubevirt["spec"]["configuration"] == {"developerConfiguration": {"featureGates": []}}
    # A second apply changes nothing: the manifests are what the server keeps (no field it rewrites or rejects).
    again = kubectl(plain, home, "apply", "-k", str(DEPLOY)).stdout.splitlines()
    changed = [line for line in again if not line.endswith(" unchanged")]
    assert again and not changed, changed


def test_with_cdi_installed_the_datavolume_crd_is_left_alone(plain: APIServerProcess, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    kubectl(plain, home, "apply", "-k", str(DEPLOY), "-l", "pykubevirt.io/cdi-stand-in!=true")
    crds = _names(plain, home, "customresourcedefinitions")
    assert "datavolumes.cdi.kubevirt.io" not in crds
    assert "virtualmachines.kubevirt.io" in crds
    assert "virt-controller" in _names(plain, home, "deployments")
