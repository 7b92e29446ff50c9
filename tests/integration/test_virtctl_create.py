"""`virtctl create … | kubectl apply -f -` against the API server with KubeVirt's admission, as the user guide pipes
them: the manifests are accepted, defaulted and refused where KubeVirt's webhooks would refuse them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import Kubectl, unique
from tests.support.apiserver_process import APIServerProcess, kubectl_env

VIRTCTL = str(Path(sys.executable).parent / "virtctl")


def virtctl_create(*argv: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([VIRTCTL, "create", *argv], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_created_manifests_apply_as_written(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    ns, small, pref = kubectl_namespace, unique("small"), unique("pref")
    created = kubectl_cli(
        "create", "-f", "-", stdin=virtctl_create("instancetype", f"--name={small}", "--cpu=2", "--memory=256Mi")
    )
    assert created.stdout.strip() == f"virtualmachineclusterinstancetype.instancetype.kubevirt.io/{small} created"
    created = kubectl_cli(
        "create", "-f", "-", stdin=virtctl_create("preference", f"--name={pref}", "--cpu-topology=cores")
    )
    assert created.stdout.strip() == f"virtualmachineclusterpreference.instancetype.kubevirt.io/{pref} created"

    vm = virtctl_create(
        *("vm", "--name=web", "-n", ns, f"--instancetype={small}", f"--preference={pref}"),
        "--volume-containerdisk=src:quay.io/containerdisks/fedora:41",
        "--volume-import=type:blank,size:64Mi,name:data",
        *("--user=fedora", "--ssh-key=ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG2yZ2hOKx6Jv8yM4t0nXz5YbB8oY me"),
        "--run-strategy=halted",
    )  # fmt: skip
    assert kubectl_cli("apply", "-f", "-", stdin=vm).stdout.strip() == "virtualmachine.kubevirt.io/web created"
    stored = json.loads(kubectl_cli("get", "vm", "web", "-n", ns, "-o", "json").stdout)
    # No kind: KubeVirt looks the names up as cluster-wide ones.
    assert stored["spec"]["instancetype"] == {"name": small}
    assert stored["spec"]["preference"] == {"name": pref}
    assert stored["spec"]["runStrategy"] == "Halted"
    assert [v["name"] for v in stored["spec"]["template"]["spec"]["volumes"]] == [
        "web-containerdisk-0",
        "data",
        "cloudinitdisk",
    ]
    assert stored["spec"]["dataVolumeTemplates"][0]["spec"]["storage"]["resources"]["requests"]["storage"] == "64Mi"
    status = kubectl_cli("get", "vm", "web", "-n", ns, "-o", "jsonpath={.status.printableStatus}").stdout
    assert status in ("", "Stopped")


def test_namespaced_types_and_what_kubevirt_refuses(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    ns = kubectl_namespace
    # -n makes the instancetype a namespaced one, in that namespace.
    created = kubectl_cli(
        "create", "-f", "-", stdin=virtctl_create("instancetype", "-n", ns, "--name=odd", "--cpu=3", "--memory=128Mi")
    )
    assert created.stdout.strip() == "virtualmachineinstancetype.instancetype.kubevirt.io/odd created"
    assert kubectl_cli("get", "vminstancetype", "odd", "-n", ns, "-o", "jsonpath={.spec.cpu.guest}").stdout == "3"
    created = kubectl_cli(
        "create", "-f", "-", stdin=virtctl_create("preference", "-n", ns, "--name=spread", "--cpu-topology=spread")
    )
    assert created.stdout.strip() == "virtualmachinepreference.instancetype.kubevirt.io/spread created"

    ok = virtctl_create("vm", "-n", ns, "--name=fine", "--instancetype=virtualmachineinstancetype/odd")
    assert kubectl_cli("apply", "-f", "-", stdin=ok).stdout.strip() == "virtualmachine.kubevirt.io/fine created"
    kind = kubectl_cli("get", "vm", "fine", "-n", ns, "-o", "jsonpath={.spec.instancetype.kind}").stdout
    assert kind == "virtualmachineinstancetype"
    # Three vCPUs cannot spread over sockets and cores two to one: KubeVirt's admission says so.
    argv = ["--instancetype=virtualmachineinstancetype/odd", "--preference=virtualmachinepreference/spread"]
    done = kubectl_cli("apply", "-f", "-", stdin=virtctl_create("vm", "-n", ns, "--name=bad", *argv), check=False)
    assert done.returncode == 1, done.stdout
    # kubectl shows a webhook's causes, as it does for KubeVirt's (their Status names no kind and no object).
    assert done.stderr.startswith(
        "The request is invalid: instancetype.spec.cpu.guest: 3 vCPUs provided by the instance type are not divisible "
    ), done.stderr
    assert kubectl_cli("get", "vm", "-n", ns, "-o", "name").stdout == "virtualmachine.kubevirt.io/fine\n"


def test_no_kubeconfig_is_needed(apiserver: APIServerProcess, tmp_path: Path) -> None:
    env = {**kubectl_env(apiserver, tmp_path), "KUBECONFIG": str(tmp_path / "absent")}
    assert "kind: VirtualMachine\n" in virtctl_create("vm", "--name=x", env=env)
    refused = subprocess.run([VIRTCTL, "create"], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr


@pytest.mark.parametrize("kind", ["vm", "instancetype", "preference"])
def test_help_lists_the_flags(kind: str) -> None:
    done = subprocess.run([VIRTCTL, "create", kind, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "--name" in done.stdout
