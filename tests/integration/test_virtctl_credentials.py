"""`virtctl credentials add-ssh-key | remove-ssh-key | set-password` against the API server: the secrets behind a VM's
guest-agent access credentials, made, changed and refused as upstream's virtctl does."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.integration.conftest import Kubectl, vm_manifest
from tests.support.apiserver_process import APIServerProcess, kubectl_env

VIRTCTL = str(Path(sys.executable).parent / "virtctl")
KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAbcdefghijklmnopqrstuvwxyz0123456789ABCDE one"
KEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIZyxwvutsrqponmlkjihgfedcba9876543210EDCBA two"


def virtctl(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VIRTCTL, *argv], capture_output=True, text=True, env=env, timeout=60, check=False)


def stopped_vm(name: str, **template_spec: Any) -> str:
    vm = vm_manifest(name)
    vm["spec"]["template"]["spec"].update(template_spec)
    return yaml.safe_dump(vm)


def secret_keys(kubectl_cli: Kubectl, ns: str, name: str) -> list[str]:
    secret = json.loads(kubectl_cli("get", "secret", name, "-n", ns, "-o", "json").stdout)
    return sorted(base64.b64decode(v).decode() for v in (secret.get("data") or {}).values())


def test_ssh_keys_go_into_a_secret_the_vm_owns(
    apiserver: APIServerProcess, kubectl_cli: Kubectl, kubectl_namespace: str, tmp_path: Path
) -> None:
    ns = kubectl_namespace
    env = kubectl_env(apiserver, tmp_path)
    kubectl_cli("apply", "-n", ns, "-f", "-", stdin=stopped_vm("keyed"))
    (tmp_path / "one.pub").write_text(KEY1 + "\n")

    # No credential for the user yet: a new secret owned by the VM, and a guest-agent credential naming it.
    done = virtctl(
        env, "credentials", "add-ssh-key", "-n", ns, "--user", "root", "--file", str(tmp_path / "one.pub"), "keyed"
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    vm = json.loads(kubectl_cli("get", "vm", "keyed", "-n", ns, "-o", "json").stdout)
    (credential,) = vm["spec"]["template"]["spec"]["accessCredentials"]
    name = credential["sshPublicKey"]["source"]["secret"]["secretName"]
    assert name.startswith("keyed-ssh-key-")
    assert credential["sshPublicKey"]["propagationMethod"] == {"qemuGuestAgent": {"users": ["root"]}}
    secret = json.loads(kubectl_cli("get", "secret", name, "-n", ns, "-o", "json").stdout)
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("VirtualMachine", "keyed", vm["metadata"]["uid"])
    assert secret_keys(kubectl_cli, ns, name) == [KEY1 + "\n"]

    # The user has a secret now: the next key joins it; the same key again changes nothing.
    done = virtctl(env, "credentials", "add-ssh-key", "-n", ns, "-u", "root", "--value", KEY2, "keyed")
    assert done.stdout == f'Successfully added the key to secret "{name}"\n', done.stderr
    assert secret_keys(kubectl_cli, ns, name) == sorted([KEY1 + "\n", KEY2])
    done = virtctl(env, "credentials", "add-ssh-key", "-n", ns, "-u", "root", "--value", KEY2, "keyed")
    assert done.stdout == f'Secret "{name}" already contains this SSH key.\n'

    # Removing drops the key's lines, and a file left empty.
    done = virtctl(env, "credentials", "remove-ssh-key", "-n", ns, "-u", "root", "--value", KEY1, "keyed")
    assert done.returncode == 0, done.stderr
    assert secret_keys(kubectl_cli, ns, name) == [KEY2]
    assert virtctl(env, "credentials", "remove-ssh-key", "-n", ns, "-u", "nobody", "--value", KEY1, "keyed").stdout == (
        "No secrets associated with user nobody\n"
    )


def test_what_virtctl_credentials_refuses(
    apiserver: APIServerProcess, kubectl_cli: Kubectl, kubectl_namespace: str, tmp_path: Path
) -> None:
    ns = kubectl_namespace
    env = kubectl_env(apiserver, tmp_path)
    kubectl_cli("create", "secret", "generic", "shared-keys", "-n", ns, f"--from-literal=k={KEY1}")
    kubectl_cli("create", "secret", "generic", "shared-pw", "-n", ns, "--from-literal=root=old")
    credentials = [
        {
            "sshPublicKey": {
                "source": {"secret": {"secretName": "shared-keys"}},
                "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}},
            }
        },
        {
            "userPassword": {
                "source": {"secret": {"secretName": "shared-pw"}},
                "propagationMethod": {"qemuGuestAgent": {}},
            }
        },
    ]
    kubectl_cli("apply", "-n", ns, "-f", "-", stdin=stopped_vm("shared", accessCredentials=credentials))
    kubectl_cli("apply", "-n", ns, "-f", "-", stdin=stopped_vm("bare"))

    def refused(*argv: str) -> str:
        done = virtctl(env, "credentials", *argv)
        assert (done.returncode, done.stdout) == (1, ""), done
        return done.stderr.strip()

    # A secret the VM does not own is left alone unless forced.
    assert refused("add-ssh-key", "-n", ns, "-u", "root", "--value", KEY2, "shared") == (
        "secret shared-keys does not have an owner reference pointing to VM shared"
    )
    done = virtctl(env, "credentials", "add-ssh-key", "-n", ns, "-u", "root", "--value", KEY2, "--force", "shared")
    assert done.stdout == 'Successfully added the key to secret "shared-keys"\n'
    assert refused("set-password", "-n", ns, "-u", "root", "-p", "new", "shared") == (
        "secret shared-pw does not have an owner reference pointing to VM shared"
    )
    done = virtctl(
        env, "credentials", "set-password", "-n", ns, "--user", "root", "--password", "new", "--force", "shared"
    )
    assert done.stdout == 'Successfully set password in secret "shared-pw"\n'
    assert secret_keys(kubectl_cli, ns, "shared-pw") == ["new"]
    assert refused("set-password", "-n", ns, "-u", "root", "-p", "x", "bare") == (
        "no secrets assigned to UserPassword AccessCredentials"
    )
    assert refused("add-ssh-key", "-n", ns, "-u", "root", "--value", KEY2, "--update-secret", "bare") == (
        "no secrets specified for user: root"
    )
    # A running VM (its VMI exists) gets a new secret only when forced: it takes effect after a restart.
    vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": "bare"}}
    vmi["spec"] = {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}
    kubectl_cli("create", "-n", ns, "-f", "-", stdin=yaml.safe_dump(vmi))
    assert refused("add-ssh-key", "-n", ns, "-u", "root", "--value", KEY2, "bare") == (
        "virtual machine bare is running. Use --force flag to update a running VM, it will take effect after restart"
    )
    assert (
        virtctl(
            env, "credentials", "add-ssh-key", "-n", ns, "-u", "root", "--value", KEY2, "--force", "bare"
        ).returncode
        == 0
    )

    assert refused("add-ssh-key", "-n", ns, "--value", KEY2, "bare") == 'required flag(s) "user" not set'
    assert refused("set-password", "-n", ns, "bare") == 'required flag(s) "user", "password" not set'
    assert refused("add-ssh-key", "-n", ns, "-u", "r", "--value", "k", "-f", "x", "bare") == (
        "if any flags in the group [file value] are set none of the others can be; [file value] were all set"
    )
    assert refused("add-ssh-key", "-n", ns, "-u", "r", "bare") == (
        "error getting ssh key: one of --file, or --value must be specified"
    )
    assert refused("remove-ssh-key", "-n", ns, "-u", "r", "--value", "k", "nope") == (
        'error getting virtual machine: virtualmachines.kubevirt.io "nope" not found'
    )
