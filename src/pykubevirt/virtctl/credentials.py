"""`virtctl credentials add-ssh-key | remove-ssh-key | set-password` (pkg/virtctl/credentials): the secrets behind a
VM's guest-agent access credentials, which the launcher then sets in the running guest through the agent."""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

from pykubevirt.api import json_patch
from pykubevirt.client.api import JSON_PATCH, KubeClient
from pykubevirt.client.errors import ApiError, Conflict, NotFound
from pykubevirt.client.resources import SECRETS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.create_params import random_suffix


def _random(prefix: str) -> str:
    """common.RandomWithPrefix: six characters of apimachinery's rand.String."""
    return prefix + random_suffix(6)


def add_commands(sub: Any, parser_class: type[argparse.ArgumentParser], add_globals: Any) -> None:
    group = sub.add_parser("credentials", help="Manipulate credentials on a virtual machine.")
    add_globals(group)
    actions = group.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class)
    actions.required = True
    texts = {
        "add-ssh-key": "Add an SSH public key to a virtual machine.",
        "remove-ssh-key": "Remove an SSH public key from a virtual machine.",
        "set-password": "Set a user's password on a virtual machine.",
    }
    for name, text in texts.items():
        cmd = actions.add_parser(name, help=text)
        add_globals(cmd)
        cmd.add_argument("vm", metavar="VM")
        cmd.add_argument("-u", "--user", default=None, help="name of the user (required)")
        cmd.add_argument("--secret", default="", help="the secret to change, when the user has several")
        cmd.add_argument("--force", action="store_true", help="change a secret the VM does not own")
        if name == "set-password":
            cmd.add_argument("-p", "--password", default=None, help="the password (required)")
            continue
        cmd.add_argument("-f", "--file", default="", help="path to the SSH public key file")
        cmd.add_argument("--value", default="", help="the SSH public key itself")
        if name == "add-ssh-key":
            cmd.add_argument("--create-secret", action="store_true", help="put the key in a new secret")
            cmd.add_argument("--update-secret", action="store_true", help="add the key to an existing secret")


def _check(args: argparse.Namespace) -> None:
    """cobra's checks before the command runs: required flags, then the exclusive groups."""
    required = ["user", *(["password"] if args.action == "set-password" else [])]
    missing = [f'"{flag}"' for flag in required if getattr(args, flag) is None]
    if missing:
        raise VirtctlError(f"required flag(s) {', '.join(missing)} not set")
    pairs = [("file", "value", args.action != "set-password")]
    pairs.append(("create-secret", "update-secret", args.action == "add-ssh-key"))
    for first, second, applies in pairs:
        if applies and getattr(args, first.replace("-", "_")) and getattr(args, second.replace("-", "_")):
            raise VirtctlError(
                f"if any flags in the group [{first} {second}] are set none of the others can be; "
                f"[{' '.join(sorted((first, second)))}] were all set"
            )


def _ssh_key(args: argparse.Namespace) -> str:
    if args.value:
        return str(args.value)
    if not args.file:
        raise VirtctlError("error getting ssh key: one of --file, or --value must be specified")
    try:
        return Path(args.file).read_text(encoding="utf-8")
    except OSError as exc:
        raise VirtctlError(f"error getting ssh key: open {args.file}: {(exc.strerror or str(exc)).lower()}") from None


def ssh_secrets_for_user(vm: dict[str, Any], user: str) -> list[str]:
    """GetSSHSecretsForUser: the secrets of the guest-agent SSH credentials that name the user."""
    found = []
    for credential in ((vm.get("spec") or {}).get("template") or {}).get("spec", {}).get("accessCredentials") or []:
        ssh = credential.get("sshPublicKey") or {}
        name = ((ssh.get("source") or {}).get("secret") or {}).get("secretName")
        agent = (ssh.get("propagationMethod") or {}).get("qemuGuestAgent")
        if name and agent is not None and user in (agent.get("users") or []):
            found.append(str(name))
    return found


def password_secrets(vm: dict[str, Any]) -> list[str]:
    found = []
    for credential in ((vm.get("spec") or {}).get("template") or {}).get("spec", {}).get("accessCredentials") or []:
        password = credential.get("userPassword") or {}
        name = ((password.get("source") or {}).get("secret") or {}).get("secretName")
        if name and (password.get("propagationMethod") or {}).get("qemuGuestAgent") is not None:
            found.append(str(name))
    return found


def find_secret_or_first(wanted: str, names: list[str]) -> str:
    if not wanted:
        if len(names) > 1:
            raise VirtctlError("multiple secrets specified, use option --secret to specify which secret to modify")
        return names[0]
    if wanted in names:
        return wanted
    raise VirtctlError(f"secret {wanted} was not assigned")


def owned_by(secret: dict[str, Any], vm: dict[str, Any]) -> bool:
    meta = vm["metadata"]
    return any(
        ref.get("kind") == "VirtualMachine" and ref.get("name") == meta["name"] and ref.get("uid") == meta.get("uid")
        for ref in secret["metadata"].get("ownerReferences") or []
    )


def _decoded(data: dict[str, str]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode("utf-8", "replace") for key, value in data.items()}


def line_has_key(line: str, key: str) -> bool:
    return line.strip().startswith(key)


def without_key(text: str, key: str) -> str:
    """removeSSHKeyFromBytes: the lines that are not the key, blank lines dropped."""
    return "\n".join(line for line in text.split("\n") if not line_has_key(line, key) and line.strip())


async def run(api: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    _check(args)
    key = _ssh_key(args) if args.action != "set-password" else ""
    try:
        vm = await api.get(VIRTUAL_MACHINES, args.vm, namespace)
    except ApiError as exc:
        raise VirtctlError(f"error getting virtual machine: {exc.message}") from exc
    if args.action == "add-ssh-key":
        await _add_key(api, vm, args, key)
    elif args.action == "remove-ssh-key":
        await _remove_key(api, vm, args, key)
    else:
        await _set_password(api, vm, args)


async def _add_key(api: KubeClient, vm: dict[str, Any], args: argparse.Namespace, key: str) -> None:
    names = ssh_secrets_for_user(vm, args.user)
    if args.create_secret or (not args.update_secret and not names):
        await _new_secret(api, vm, args, key)
        return
    if not names:
        raise VirtctlError(f"no secrets specified for user: {args.user}")
    name = find_secret_or_first(args.secret, names)
    namespace = vm["metadata"]["namespace"]
    try:
        secret = await api.get(SECRETS, name, namespace)
    except ApiError as exc:
        raise VirtctlError(f'error getting secret "{name}": {exc.message}') from exc
    data = secret.get("data") or {}
    if any(line_has_key(line, key) for text in _decoded(data).values() for line in text.split("\n")):
        sys.stdout.write(f'Secret "{name}" already contains this SSH key.\n')
        return
    if not args.force and not owned_by(secret, vm):
        raise VirtctlError(f"secret {name} does not have an owner reference pointing to VM {vm['metadata']['name']}")
    value = base64.b64encode(key.encode()).decode()
    path = f"/data/{_random('ssh-key-')}"
    patch: list[dict[str, Any]] = [{"op": "add", "path": path, "value": value}]
    if "data" not in secret:
        patch = [{"op": "test", "path": "/data", "value": None}, {"op": "add", "path": "/data", "value": {}}, *patch]
    try:
        await api.patch(SECRETS, name, patch, namespace, patch_type=JSON_PATCH)
    except ApiError as exc:
        raise VirtctlError(f'error patching secret "{name}": {exc.message}') from exc
    sys.stdout.write(f'Successfully added the key to secret "{name}"\n')


async def _new_secret(api: KubeClient, vm: dict[str, Any], args: argparse.Namespace, key: str) -> None:
    meta = vm["metadata"]
    if not args.force:
        try:
            await api.get(VIRTUAL_MACHINE_INSTANCES, meta["name"], meta["namespace"])
        except NotFound:
            pass
        except ApiError as exc:
            raise VirtctlError(f"error when getting virtual machine instance: {exc.message}") from exc
        else:
            raise VirtctlError(
                f"virtual machine {meta['name']} is running. Use --force flag to update a running VM, it will take "
                "effect after restart"
            )
    owner = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": meta["name"], "uid": meta.get("uid")}
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"generateName": f"{meta['name']}-ssh-key-", "ownerReferences": [{**owner, "controller": True}]},
        "data": {_random("ssh-key-"): base64.b64encode(key.encode()).decode()},
    }
    try:
        secret = await api.create(SECRETS, body, meta["namespace"])
    except ApiError as exc:
        raise VirtctlError(f"error creating secret: {exc.message}") from exc
    credential = {
        "sshPublicKey": {
            "source": {"secret": {"secretName": secret["metadata"]["name"]}},
            "propagationMethod": {"qemuGuestAgent": {"users": [args.user]}},
        }
    }
    spec = vm["spec"]["template"].get("spec") or {}
    path = "/spec/template/spec/accessCredentials"
    patch: list[dict[str, Any]] = [{"op": "add", "path": f"{path}/-", "value": credential}]
    if "accessCredentials" not in spec:
        patch = [{"op": "test", "path": path, "value": None}, {"op": "add", "path": path, "value": []}, *patch]
    try:
        await api.patch(VIRTUAL_MACHINES, meta["name"], patch, meta["namespace"], patch_type=JSON_PATCH)
    except ApiError as exc:
        raise VirtctlError(f"error patching virtual machine: {exc.message}") from exc


async def _remove_key(api: KubeClient, vm: dict[str, Any], args: argparse.Namespace, key: str) -> None:
    names = ssh_secrets_for_user(vm, args.user)
    if not names:
        sys.stdout.write(f"No secrets associated with user {args.user}\n")
        return
    if args.secret and args.secret not in names:
        raise VirtctlError(f"secret {args.secret} is not associated with user {args.user}")
    namespace = vm["metadata"]["namespace"]
    for name in [args.secret] if args.secret else names:
        # Retried on a conflict, as RetryOnConflict does (5 tries): the secret is read again.
        conflict = ""
        for _ in range(5):
            try:
                secret = await api.get(SECRETS, name, namespace)
            except NotFound:
                break
            if not args.force and not owned_by(secret, vm):
                raise VirtctlError(
                    f"secret {name} does not have an owner reference pointing to VM {vm['metadata']['name']}"
                )
            kept = {}
            for file, text in _decoded(secret.get("data") or {}).items():
                if rest := without_key(text, key):
                    kept[file] = base64.b64encode(rest.encode()).decode()
            secret["data"] = kept
            try:
                await api.update(SECRETS, secret)
                break
            except Conflict as exc:
                conflict = exc.message
                continue
            except NotFound:
                break
            except ApiError as exc:
                raise VirtctlError(exc.message) from exc
        else:
            raise VirtctlError(conflict)


async def _set_password(api: KubeClient, vm: dict[str, Any], args: argparse.Namespace) -> None:
    names = password_secrets(vm)
    if not names:
        raise VirtctlError("no secrets assigned to UserPassword AccessCredentials")
    name = find_secret_or_first(args.secret, names)
    namespace = vm["metadata"]["namespace"]
    secret: dict[str, Any] = {}
    if not args.force:
        try:
            secret = await api.get(SECRETS, name, namespace)
        except ApiError as exc:
            raise VirtctlError(f'error getting secret "{name}": {exc.message}') from exc
        if not owned_by(secret, vm):
            raise VirtctlError(
                f"secret {name} does not have an owner reference pointing to VM {vm['metadata']['name']}"
            )
    value = base64.b64encode(str(args.password).encode()).decode()
    path = f"/data/{json_patch.escape(args.user)}"
    try:
        await api.patch(SECRETS, name, [{"op": "add", "path": path, "value": value}], namespace, patch_type=JSON_PATCH)
    except ApiError:
        full = [
            {"op": "test", "path": "/data", "value": None},
            {"op": "add", "path": "/data", "value": {}},
            {"op": "add", "path": path, "value": value},
        ]
        try:
            await api.patch(SECRETS, name, full, namespace, patch_type=JSON_PATCH)
        except ApiError as exc:
            raise VirtctlError(f'error patching secret "{name}": {exc.message}') from exc
    sys.stdout.write(f'Successfully set password in secret "{name}"\n')
