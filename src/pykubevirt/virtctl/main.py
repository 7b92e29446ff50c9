"""`virtctl`: KubeVirt's command line for VM operations (start, stop, restart, pause, console, vnc…).

Flags, output lines and error texts follow upstream virtctl; errors are one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from pykubevirt.client.api import KubeClient
from pykubevirt.client.config import ConfigError, load_config
from pykubevirt.client.errors import ApiError
from pykubevirt.virtctl import (
    commands,
    create,
    credentials,
    guest_agent,
    log_verbosity,
    memory_dump,
    object_graph,
    usbredir,
    vmexport,
)
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.expand import add_arguments as add_expand_arguments
from pykubevirt.virtctl.expose import add_arguments as add_expose_arguments
from pykubevirt.virtctl.image_upload_args import add_arguments as add_upload_arguments
from pykubevirt.virtctl.scp import add_arguments as add_scp_arguments
from pykubevirt.virtctl.ssh import add_arguments as add_ssh_arguments
from pykubevirt.virtctl.vmexport_args import add_arguments as add_vmexport_arguments
from pykubevirt.virtctl.volumes import add_arguments as add_volume_arguments

# pflag booleans take `--flag`, `--flag=true` or `--flag=false`, never a separate value.
BOOL_FLAGS = (
    *("--paused", "--dry-run", "--force", "--proxy-only", "--preserve-session", "--client", "--persist"),
    *("--insecure", "--no-create", "--force-bind", "--stdio", "--recursive", "--preserve", "--namespaced"),
    *("--create-secret", "--update-secret", "--create-claim", "--port-forward", "--no-launch"),
    *("--block-volume", "--datasource"),
    *("--keep-vme", "--delete-vme", "--manifest", "--include-secret"),
)
# The dest of a command's positional arguments when cobra, not argparse, is to count them (memory-dump's ExactArgs).
SPREAD_POSITIONALS = "positionals"


class _Parser(argparse.ArgumentParser):
    """Usage errors as cobra reports them with SilenceUsage: one line, status 1."""

    def error(self, message: str) -> NoReturn:
        if match := re.match(r"argument COMMAND: invalid choice: '([^']*)'", message):
            message = f'unknown command "{match.group(1)}" for "virtctl"'
        elif match := re.match(r"argument [^:]+: (invalid argument .*)", message):
            message = match.group(1)
        elif message.startswith("unrecognized arguments: "):
            message = f"unknown flag: {message.split(': ', 1)[1].split()[0]}"
        self.exit(1, f"{message}\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # cobra takes positional arguments anywhere among the flags (`memory-dump get --create-claim vm`), but
        # argparse fills a list positional only up to the first flag: the words it leaves over join that list.
        parsed, extras = super().parse_known_args(args, namespace)
        spread = getattr(parsed, SPREAD_POSITIONALS, None)
        if isinstance(spread, list):
            spread.extend(arg for arg in extras if not arg.startswith("-"))
            extras = [arg for arg in extras if arg.startswith("-")]
        return parsed, extras


def _globals(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # Accepted before and after the command, as kubectl's persistent flags are.
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument("--kubeconfig", default=default, help="path to the kubeconfig file")
    parser.add_argument("--context", default=default, help="the kubeconfig context to use")
    parser.add_argument("-n", "--namespace", default=default, help="namespace (default: the context's, else default)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="virtctl", description="virtctl controls virtual machine related operations on your cluster.")
    _globals(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def command(name: str, help_text: str, *names: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text)
        _globals(cmd, suppress=True)
        for arg in names:
            cmd.add_argument(arg)
        return cmd

    start = command("start", "Start a virtual machine.", "name")
    start.add_argument("--paused", action="store_true", help="start the virtual machine paused")
    for name, text in (("stop", "Stop a virtual machine."), ("restart", "Restart a virtual machine.")):
        cmd = command(name, text, "name")
        cmd.add_argument("--force", action="store_true", help="only with --grace-period=0: stop immediately")
        cmd.add_argument("--grace-period", type=int, default=None, help="seconds the VMI gets to shut down")
    for name, text in (("pause", "Pause a virtual machine"), ("unpause", "Unpause a virtual machine")):
        command(name, text, "type", "name")
    for name in ("start", "stop", "restart", "pause", "unpause"):
        sub.choices[name].add_argument("--dry-run", action="store_true", help="validate only, change nothing")
    command("soft-reboot", "Soft reboot a virtual machine instance", "name")
    command("reset", "Reset a virtual machine instance", "name")
    guest_agent.add_commands(command)
    migrate = command("migrate", "Migrate a virtual machine.", "name")
    migrate.add_argument(
        "--addedNodeSelector", default="", help="additional node selector for the target pod: key=value,key2=value2"
    )
    migrate_cancel = command("migrate-cancel", "Cancel migration of a virtual machine.", "name")
    evacuate_cancel = command(
        "evacuate-cancel", "Cancel evacuation for a VM, VMI, or all VMIs on a node", "kind", "name"
    )
    for cmd in (migrate, migrate_cancel, evacuate_cancel):
        cmd.add_argument("--dry-run", action="store_true", help="validate only, change nothing")
    object_graph.add_arguments(command("objectgraph", "Returns dependency graph related to a VM|VMI."))
    console = command("console", "Connect to a console of a virtual machine instance.", "name")
    console.add_argument("--timeout", type=int, default=5, help="minutes to wait for the VMI to be ready")
    vnc = command("vnc", "Open a vnc connection to a virtual machine instance.", "name")
    # `virtctl vnc screenshot NAME`, KubeVirt's subcommand: the first word is then the subcommand.
    vnc.add_argument("screenshot_of", nargs="?", metavar="NAME", help="with `screenshot`: the VMI")
    vnc.add_argument("--file", "-f", help="screenshot: where to store the PNG ('-' for stdout)")
    vnc.add_argument("--move-cursor", "-m", action="store_true", help="screenshot: wake a screen saver first")
    vnc.add_argument("--address", default="127.0.0.1", help="address the local proxy listens on")
    vnc.add_argument("--port", type=int, default=0, help="port of the local proxy (default: a free one)")
    vnc.add_argument("--proxy-only", action="store_true", help="only run the proxy and print its port")
    vnc.add_argument("--preserve-session", action="store_true", help="keep an existing VNC session")
    forward = command("port-forward", "Forward local ports to a virtualmachine or virtualmachineinstance.")
    forward.add_argument("target", metavar="TYPE/NAME[/NAMESPACE]")
    forward.add_argument("ports", metavar="[PROTOCOL/]LOCAL[:REMOTE]", nargs="*")
    forward.add_argument("--address", default="127.0.0.1", help="the address the local ports are opened on")
    forward.add_argument("--stdio", action="store_true", help="forward a single port to stdin/stdout")
    add_ssh_arguments(command("ssh", "Open a SSH connection to a virtual machine instance."))
    add_scp_arguments(command("scp", "SCP files from/to a virtual machine instance."))
    add_expose_arguments(
        command("expose", "Expose a virtual machine instance, virtual machine, or replica set as a new service.")
    )
    add_volume_arguments(sub, command)
    add_upload_arguments(command)
    create.add_commands(sub, _Parser, lambda cmd: _globals(cmd, suppress=True))
    credentials.add_commands(sub, _Parser, lambda cmd: _globals(cmd, suppress=True))
    log_verbosity.add_commands(sub, _Parser, lambda cmd: _globals(cmd, suppress=True))
    add_expand_arguments(
        command("expand", "Return the VirtualMachine object with expanded instancetype and preference.")
    )
    memory_dump.add_arguments(command("memory-dump", "Dump the memory of a running VM to a pvc"))
    usbredir.add_arguments(command("usbredir", "Redirect an USB device to a virtual machine instance."))
    add_vmexport_arguments(command("vmexport", "Export a VM volume."))
    command("permitted-devices", "List the permitted devices for vmis.")
    version = command("version", "Print the client and server version information.")
    version.add_argument("-c", "--client", action="store_true", help="client version only")
    return parser


# pflag string flags take the next argument as their value even when it starts with "-" (`-t -oBatchMode=yes`),
# which argparse would read as an option: such pairs are joined as `--flag=value` first.
# Only ssh's local options need it (their values are ssh options); -c is also `version`'s boolean.
DASH_VALUE_FLAGS = {"-t": "--local-ssh-opts", "--local-ssh-opts": "--local-ssh-opts"}


def attach_dash_values(argv: Sequence[str]) -> list[str]:
    """`-t -oX` → `--local-ssh-opts=-oX`."""
    result: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in DASH_VALUE_FLAGS and i + 1 < len(args) and args[i + 1].startswith("-"):
            result.append(f"{DASH_VALUE_FLAGS[arg]}={args[i + 1]}")
            i += 2
            continue
        result.append(arg)
        i += 1
    return result


def normalise_bools(argv: Sequence[str]) -> list[str]:
    """`--flag=true` → `--flag`, `--flag=false` → nothing, for pflag-style booleans."""
    result: list[str] = []
    for arg in argv:
        flag, sep, value = arg.partition("=")
        if sep and flag in BOOL_FLAGS:
            if value.lower() in ("true", "1", "t"):
                result.append(flag)
            elif value.lower() not in ("false", "0", "f"):
                raise VirtctlError(
                    f'invalid argument "{value}" for "{flag}" flag: strconv.ParseBool: parsing "{value}"'
                )
            continue
        result.append(arg)
    return result


async def _run(args: argparse.Namespace) -> None:
    if args.command == "create":
        create.run(args)
        return
    if args.command == "memory-dump":
        memory_dump.check_args(args)
    if args.command == "vmexport":
        vmexport.prepare(args)
    try:
        config = load_config(args.kubeconfig, context=args.context)
    except ConfigError as exc:
        if args.command == "version" and args.client:
            config = None
        else:
            raise VirtctlError(str(exc)) from exc
    namespace = args.namespace or (config.namespace if config is not None else "default")
    client = KubeClient(config, qps=0, user_agent="virtctl") if config is not None else None
    try:
        if args.command == "memory-dump" and client is not None:
            await memory_dump.run(client, namespace, args)
        elif args.command == "vmexport" and client is not None:
            await vmexport.run(client, namespace, args)
        else:
            await commands.run(client, namespace, args)
    finally:
        if client is not None:
            await client.close()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            raw = sys.argv[1:] if argv is None else argv
            args = build_parser().parse_args(attach_dash_values(normalise_bools(raw)))
        except SystemExit as exc:
            # Usage errors (status 1, already printed) and --help (status 0).
            return int(exc.code or 0)
        asyncio.run(_run(args))
    except VirtctlError as exc:
        print(_one_line(str(exc)), file=sys.stderr)
        return 1
    except ApiError as exc:
        print(_one_line(exc.message), file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(_one_line(str(exc) or type(exc).__name__), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
