"""`virtctl create … | kubectl apply -f -` against the API server with KubeVirt's admission, as the user guide pipes
them: the manifests are accepted, defaulted and refused where KubeVirt's webhooks would refuse them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


def virtctl(
    *argv: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [VIRTCTL, *argv], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_virtctl_expand_shows_the_vm_as_its_instancetype_and_preference_make_it(
    apiserver: APIServerProcess, kubectl_cli: Kubectl, kubectl_namespace: str, tmp_path: Path
) -> None:
    ns, size, shape = kubectl_namespace, unique("size"), unique("shape")
    env = kubectl_env(apiserver, tmp_path)
    kubectl_cli(
        "create", "-f", "-", stdin=virtctl_create("instancetype", f"--name={size}", "--cpu=2", "--memory=192Mi")
    )
    kubectl_cli("create", "-f", "-", stdin=virtctl_create("preference", f"--name={shape}", "--cpu-topology=cores"))
    manifest = virtctl_create(
        *("vm", "--name=sized", f"--instancetype={size}", f"--preference={shape}"),
        "--volume-containerdisk=src:pykubevirt.local/demo-guest:1.0",
    )

    # From a file (here stdin): expanded without being stored.
    done = virtctl("expand", "-n", ns, "--file", "-", "-o", "json", stdin=manifest, env=env)
    assert done.returncode == 0, done.stderr
    expanded = json.loads(done.stdout)
    spec = expanded["spec"]
    assert "instancetype" not in spec and "preference" not in spec
    domain = spec["template"]["spec"]["domain"]
    # Two vCPUs as cores (the preference), the instancetype's memory, a disk for the volume, the pod network.
    assert (domain["cpu"]["cores"], domain["cpu"]["sockets"], domain["cpu"]["threads"]) == (2, 1, 1)
    assert domain["memory"]["guest"] == "192Mi"
    assert [d["name"] for d in domain["devices"]["disks"]] == ["sized-containerdisk-0"]
    assert spec["template"]["spec"]["networks"] == [{"name": "default", "pod": {}}]
    assert expanded["metadata"]["namespace"] == ns
    assert kubectl_cli("get", "vm", "-n", ns, "-o", "name").stdout == ""

    # From the cluster, in YAML: the same template.
    kubectl_cli("apply", "-n", ns, "-f", "-", stdin=manifest)
    done = virtctl("expand", "-n", ns, "--vm", "sized", env=env)
    assert done.returncode == 0, done.stderr
    stored = yaml.safe_load(done.stdout)
    assert stored["spec"]["template"]["spec"]["domain"]["cpu"] == domain["cpu"]
    assert "instancetype" not in stored["spec"]

    # A VM without matchers comes back as it is.
    plain = virtctl_create("vm", "--name=plain", "--memory=64Mi")
    done = virtctl("expand", "-n", ns, "-f", "-", "-o", "json", stdin=plain, env=env)
    assert json.loads(done.stdout)["spec"]["template"]["spec"]["domain"] == {
        "devices": {},
        "memory": {"guest": "64Mi"},
        "resources": {},
    }


def test_virtctl_expand_errors(
    apiserver: APIServerProcess, kubectl_cli: Kubectl, kubectl_namespace: str, tmp_path: Path
) -> None:
    ns = kubectl_namespace
    env = kubectl_env(apiserver, tmp_path)
    small = unique("small")
    kubectl_cli(
        "create", "-f", "-", stdin=virtctl_create("instancetype", f"--name={small}", "--cpu=1", "--memory=64Mi")
    )
    missing = virtctl_create("vm", "--name=lost", "--instancetype=no-such-type")
    done = virtctl("expand", "-n", ns, "-f", "-", stdin=missing, env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"error expanding VirtualMachine - lost in namespace - {ns}: "
        'virtualmachineclusterinstancetypes.instancetype.kubevirt.io "no-such-type" not found\n'
    )
    # Stored, the same VM is the server's failure to expand.
    kubectl_cli("apply", "-n", ns, "-f", "-", stdin=missing)
    done = virtctl("expand", "-n", ns, "--vm", "lost", env=env)
    assert done.stderr.startswith(
        f"error expanding VirtualMachine - lost in namespace - {ns}: Internal error occurred: "
    )
    # A template that sets what the instancetype sets conflicts, as KubeVirt's webhook says.
    vm = yaml.safe_load(virtctl_create("vm", "--name=clash", f"--instancetype={small}"))
    vm["spec"]["template"]["spec"]["domain"]["cpu"] = {"sockets": 2}
    done = virtctl("expand", "-n", ns, "-f", "-", stdin=json.dumps(vm), env=env)
    assert done.stderr.endswith(
        ": VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type\n"
    ), done.stderr
    # The manifest's namespace must be the request's.
    other = virtctl_create("vm", "--name=elsewhere", "-n", "other", f"--instancetype={small}")
    done = virtctl("expand", "-n", ns, "-f", "-", stdin=other, env=env)
    assert done.stderr.endswith(f": VM namespace must be empty or {ns}\n"), done.stderr
    assert virtctl("expand", "-n", ns, "--vm", "nope", env=env).stderr == (
        f'error expanding VirtualMachine - nope in namespace - {ns}: virtualmachine.kubevirt.io "nope" not found\n'
    )
    for argv, message in (
        ([], "error invalid arguments - VirtualMachine name or file must be provided"),
        (["--vm=a", "--file=b"],
         "if any flags in the group [file vm] are set none of the others can be; [file vm] were all set"),
        (["--vm=a", "-o", "toml"], "error not supported output format defined: toml"),
        ([f"--file={tmp_path / 'absent.yaml'}"],
         f"error reading file open {tmp_path / 'absent.yaml'}: no such file or directory"),
    ):  # fmt: skip
        done = virtctl("expand", "-n", ns, *argv, env=env)
        assert (done.returncode, done.stderr) == (1, message + "\n")


def test_virtctl_expand_is_for_viewers(
    apiserver: APIServerProcess, kubectl_cli: Kubectl, kubectl_namespace: str, tmp_path: Path
) -> None:
    """kubevirt.io:view (aggregated into view) grants get on virtualmachines/expand-spec, update on expand-vm-spec."""
    ns = kubectl_namespace
    kubectl_cli("apply", "-n", ns, "-f", "-", stdin=virtctl_create("vm", "--name=seen"))
    kubectl_cli("create", "serviceaccount", "reader", "-n", ns)
    config = yaml.safe_load(apiserver.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = kubectl_cli("create", "token", "reader", "-n", ns).stdout.strip()
    (tmp_path / "reader").write_text(yaml.safe_dump(config))
    env = {**kubectl_env(apiserver, tmp_path), "KUBECONFIG": str(tmp_path / "reader")}
    refused = virtctl("expand", "-n", ns, "--vm", "seen", env=env)
    assert refused.returncode == 1
    assert 'cannot get resource "virtualmachines/expand-spec" in API group "subresources.kubevirt.io"' in refused.stderr
    refused = virtctl("expand", "-n", ns, "-f", "-", stdin=virtctl_create("vm", "--name=x"), env=env)
    assert 'cannot update resource "expand-vm-spec" in API group "subresources.kubevirt.io"' in refused.stderr
    kubectl_cli("create", "rolebinding", "reader", "-n", ns, "--clusterrole=view", f"--serviceaccount={ns}:reader")
    assert virtctl("expand", "-n", ns, "--vm", "seen", env=env).returncode == 0
    assert virtctl("expand", "-n", ns, "-f", "-", stdin=virtctl_create("vm", "--name=x"), env=env).returncode == 0
