"""`virtctl ssh [USER@]TYPE/NAME[/NAMESPACE]` (pkg/virtctl/ssh): the local `ssh`, tunnelled by a ProxyCommand of
`virtctl port-forward --stdio=true`, as KubeVirt's virtctl has done since its native client was removed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.portforward import ForwardTarget, parse_target

SSH = "ssh"


def default_username() -> str:
    for variable in ("USER", "USERNAME", "LOGNAME"):
        if value := os.environ.get(variable):
            return value
    return ""


def default_identity_file() -> str:
    return str(Path.home() / ".ssh" / "id_rsa")


def default_known_hosts() -> str:
    return str(Path.home() / ".ssh" / "kubevirt_known_hosts")


@dataclass(slots=True)
class SSHOptions:
    port: int = 22
    username: str = ""
    identity_file: str = ""
    # Upstream passes -i only when the flag was given; otherwise ssh's own defaults and agent apply.
    identity_file_provided: bool = False
    local_ssh_opts: list[str] = field(default_factory=list)
    command: str = ""


def parse_ssh_target(arg: str) -> tuple[ForwardTarget, str]:
    """`[username@]type/name[/namespace]` → the target and the username ("" when none)."""
    username = ""
    parts = arg.split("@")
    if len(parts) > 1:
        username = parts[0]
        if not username:
            raise VirtctlError("expected username before '@'")
        arg = parts[1]
    if not arg:
        raise VirtctlError("expected target after '@'")
    return parse_target(arg), username


def proxy_program() -> list[str]:
    """This virtctl, run again: its own path (upstream uses os.Args[0]), or `python -m` when run as a module."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and not argv0.endswith(".py"):
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found and os.access(found, os.X_OK):
            return [os.path.abspath(found)]
    return [sys.executable, "-m", "pykubevirt.virtctl.main"]


def proxy_command(target: ForwardTarget, namespace: str, port: int, global_flags: list[str]) -> str:
    """`ProxyCommand=<virtctl> port-forward --stdio=true kind/name/namespace port`; ssh runs it through a shell.

    The kubeconfig and context flags this virtctl was given are passed on, so the tunnel reaches the same cluster.
    """
    argv = [*proxy_program(), *global_flags, "port-forward", "--stdio=true"]
    argv += [f"{target.kind}/{target.name}/{namespace}", str(port)]
    return "ProxyCommand=" + shlex.join(argv)


def local_client_argv(
    program: str,
    target: ForwardTarget,
    namespace: str,
    options: SSHOptions,
    global_flags: list[str],
    client_args: list[str],
) -> list[str]:
    """ssh's or scp's command line in upstream's order (LocalClientCmd): proxy, extra options, -i, the client's."""
    argv = [program, "-o", proxy_command(target, namespace, options.port, global_flags)]
    argv += options.local_ssh_opts
    if options.identity_file_provided:
        argv += ["-i", options.identity_file]
    return argv + client_args


def remote_host(target: ForwardTarget, namespace: str, username: str) -> str:
    """`[user@]kind.name.namespace`: the host name ssh sees; the ProxyCommand is what reaches the VM."""
    host = f"{target.kind}.{target.name}.{namespace}"
    return f"{username}@{host}" if username else host


def ssh_argv(
    target: ForwardTarget, namespace: str, options: SSHOptions, global_flags: list[str], program: str = SSH
) -> list[str]:
    """The local ssh's command line: the destination, then the command if one was given."""
    client_args = [remote_host(target, namespace, options.username)]
    if options.command:
        client_args.append(options.command)
    return local_client_argv(program, target, namespace, options, global_flags, client_args)


def run_local_client(argv: list[str]) -> None:
    """Run ssh or scp in the foreground with this terminal; a failure is `exit status N`, as exec.Cmd reports it."""
    try:
        code = subprocess.run(argv, check=False).returncode
    except FileNotFoundError:
        raise VirtctlError(f'exec: "{argv[0]}": executable file not found in $PATH') from None
    if code != 0:
        raise VirtctlError(f"exit status {code}")


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("target", metavar="[USER@]TYPE/NAME[/NAMESPACE]")
    add_client_arguments(cmd)
    # Not `command`: that is the virtctl subcommand's name in the parsed arguments.
    cmd.add_argument("-c", "--command", dest="ssh_command", default="", help="command to execute in the VM")


def add_client_arguments(cmd: argparse.ArgumentParser) -> None:
    """The flags ssh and scp share (AddCommandlineArgs)."""
    cmd.add_argument("-p", "--port", type=int, default=22, help="port on the VM to send SSH traffic to")
    cmd.add_argument("-l", "--username", default=None, help="user to log in as (default: $USER)")
    cmd.add_argument("-i", "--identity-file", default=None, help="private key (default: ssh's own, or its agent)")
    cmd.add_argument("--known-hosts", default=None, help="known_hosts file (accepted for compatibility; unused)")
    cmd.add_argument(
        "-t", "--local-ssh-opts", action="append", default=[], help="an option for the local ssh (repeatable)"
    )


def options_from(args: argparse.Namespace, username: str) -> SSHOptions:
    return SSHOptions(
        port=args.port,
        username=username or (args.username if args.username is not None else default_username()),
        identity_file=args.identity_file or default_identity_file(),
        identity_file_provided=args.identity_file is not None,
        local_ssh_opts=list(args.local_ssh_opts),
        command=getattr(args, "ssh_command", ""),
    )


def run_ssh(namespace: str, args: argparse.Namespace, global_flags: list[str]) -> None:
    """`virtctl ssh`: the local ssh to the target."""
    target, username = parse_ssh_target(args.target)
    run_local_client(ssh_argv(target, target.namespace or namespace, options_from(args, username), global_flags))
