"""`virtctl scp SOURCE DESTINATION` (pkg/virtctl/scp): the local `scp` through the same port-forward ProxyCommand
as `virtctl ssh`; one side is `[USER@]TYPE/NAME[/NAMESPACE]:PATH`, the other a local path.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.portforward import ForwardTarget
from pykubevirt.virtctl.ssh import (
    add_client_arguments,
    local_client_argv,
    options_from,
    parse_ssh_target,
    remote_host,
    run_local_client,
)

SCP = "scp"


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy: the VM side (target, user, path), the local path, and which way the bytes go."""

    target: ForwardTarget
    username: str
    remote_path: str
    local_path: str
    to_remote: bool


def parse_copy(source: str, destination: str) -> Copy:
    """Which side is the VM's (the one with a colon), with upstream's errors when both or neither are."""
    if ":" in source and ":" in destination:
        raise VirtctlError(
            f'copying from a remote location to another remote location is not supported: "{source}" to "{destination}"'
        )
    if ":" not in source and ":" not in destination:
        raise VirtctlError(
            f'none of the two provided locations seems to be a remote location: "{source}" to "{destination}"'
        )
    to_remote = ":" in destination
    remote, local = (destination, source) if to_remote else (source, destination)
    where, path = remote.split(":", 1)
    target, username = parse_ssh_target(where)
    return Copy(target, username, path, local, to_remote)


def scp_argv(
    copy: Copy, namespace: str, args: argparse.Namespace, global_flags: list[str], program: str = SCP
) -> list[str]:
    """The local scp's command line (BuildSCPTarget): -r, -p (preserve), then source and destination."""
    options = options_from(args, copy.username)
    remote = f"{remote_host(copy.target, namespace, options.username)}:{copy.remote_path}"
    client_args = [*(["-r"] if args.recursive else []), *(["-p"] if args.preserve else [])]
    client_args += [copy.local_path, remote] if copy.to_remote else [remote, copy.local_path]
    return local_client_argv(program, copy.target, namespace, options, global_flags, client_args)


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("source", metavar="SOURCE")
    cmd.add_argument("destination", metavar="DESTINATION")
    add_client_arguments(cmd)
    cmd.add_argument("-r", "--recursive", action="store_true", help="recursively copy entire directories")
    cmd.add_argument(
        "--preserve", action="store_true", help="preserve modification times, access times and modes of the original"
    )


def run_scp(namespace: str, args: argparse.Namespace, global_flags: list[str]) -> None:
    """`virtctl scp`: the local scp between this machine and the target."""
    copy = parse_copy(args.source, args.destination)
    run_local_client(scp_argv(copy, copy.target.namespace or namespace, args, global_flags))
