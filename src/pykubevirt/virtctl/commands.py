"""The virtctl commands: what each sends and prints, with upstream's texts (pkg/virtctl/{vm,pause,unpause,…})."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from pykubevirt.api.vm_run_strategy import RunStrategyError, run_strategy
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import VIRTUAL_MACHINES
from pykubevirt.virtapi.discovery import version_info
from pykubevirt.virtctl import (
    evacuate_cancel,
    guest_agent,
    image_upload,
    migrate,
    object_graph,
    permitted_devices,
    volumes,
)
from pykubevirt.virtctl.client import VirtctlError, error_message, put_subresource, server_version

DRY_RUN_ALL = ["All"]
FORCE_AND_GRACE = "Must both use --force=true and set --grace-period."
VM_TYPES = ("vm", "vms", "virtualmachine", "virtualmachines")
VMI_TYPES = ("vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances")
# Go's %#v of version.Info: field names and order.
VERSION_FIELDS = (
    ("GitVersion", "gitVersion"),
    ("GitCommit", "gitCommit"),
    ("GitTreeState", "gitTreeState"),
    ("BuildDate", "buildDate"),
    ("GoVersion", "goVersion"),
    ("Compiler", "compiler"),
    ("Platform", "platform"),
)


def _dry_run(enabled: bool, body: dict[str, Any]) -> dict[str, Any]:
    if enabled:
        print("Dry Run execution")
        body["dryRun"] = DRY_RUN_ALL
    return body


def format_version(info: dict[str, Any]) -> str:
    """`version.Info{GitVersion:"v1.2.0", …}`, as Go prints a struct with %#v."""
    fields = ", ".join(f'{go}:"{info.get(key, "")}"' for go, key in VERSION_FIELDS)
    return f"version.Info{{{fields}}}"


def _need(client: KubeClient | None) -> KubeClient:
    assert client is not None
    return client


# The VMI commands that are one PUT: command → (subresource, what its error says was being done, KubeVirt's spelling).
VMI_ACTIONS = {"soft-reboot": ("softreboot", "soft rebooting"), "reset": ("reset", "reseting")}


async def _vmi_action(api: KubeClient, namespace: str, command: str, name: str) -> None:
    subresource, doing = VMI_ACTIONS[command]
    try:
        await put_subresource(api, namespace, "virtualmachineinstances", name, subresource, None)
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"Error {doing} VirtualMachineInstance {name}: {error_message(exc)}") from exc
    print(f"VMI {name} was scheduled to {command}")


# The commands another module carries out whole, given the client, namespace and arguments.
MODULE_COMMANDS: dict[str, Callable[[KubeClient, str, argparse.Namespace], Awaitable[None]]] = {
    "image-upload": image_upload.image_upload,
    "addvolume": volumes.add_volume,
    "removevolume": volumes.remove_volume,
    "migrate": migrate.migrate,
    "migrate-cancel": migrate.migrate_cancel,
    "evacuate-cancel": evacuate_cancel.run,
    "objectgraph": object_graph.run,
    "permitted-devices": permitted_devices.run,
}


async def run(client: KubeClient | None, namespace: str, args: argparse.Namespace) -> None:
    """Execute the parsed command; failures raise VirtctlError or ApiError."""
    command = args.command
    if command == "version":
        await _version(client, args.client)
        return
    api = _need(client)
    if command == "start":
        await _start(api, namespace, args)
    elif command in ("stop", "restart"):
        await _stop_or_restart(api, namespace, args)
    elif command in ("pause", "unpause"):
        await _pause_or_unpause(api, namespace, command, args)
    elif command in MODULE_COMMANDS:
        await MODULE_COMMANDS[command](api, namespace, args)
    elif command in guest_agent.COMMANDS:
        await guest_agent.run(api, namespace, command, args.name)
    elif command in VMI_ACTIONS:
        await _vmi_action(api, namespace, command, args.name)
    elif command == "console":
        from pykubevirt.virtctl.console import run_console

        await run_console(api, namespace, args.name, args.timeout)
    elif command == "port-forward":
        from pykubevirt.virtctl.portforward import run_port_forward

        if len(args.ports) < 1:
            raise VirtctlError(
                f"argument validation failed: port-forward requires at least 2 arg(s), received {1 + len(args.ports)}"
            )
        await run_port_forward(api, namespace, args.target, args.ports, address=args.address, stdio=args.stdio)
    elif command in ("ssh", "scp"):
        from pykubevirt.virtctl.scp import run_scp
        from pykubevirt.virtctl.ssh import run_ssh

        # The tunnel (a virtctl the local client runs) must reach the same cluster as this one.
        flags = [*(["--kubeconfig", args.kubeconfig] if args.kubeconfig else [])]
        flags += ["--context", args.context] if args.context else []
        (run_ssh if command == "ssh" else run_scp)(namespace, args, flags)
    elif command == "expose":
        from pykubevirt.virtctl.expose import expose

        await expose(api, namespace, args)
    elif command == "adm":
        from pykubevirt.virtctl import log_verbosity

        await log_verbosity.run(api, args)
    elif command == "credentials":
        from pykubevirt.virtctl import credentials

        await credentials.run(api, namespace, args)
    elif command == "expand":
        from pykubevirt.virtctl.expand import run_expand

        await run_expand(api, namespace, args)
    elif command == "vnc" and (args.name == "screenshot" or args.screenshot_of):
        from pykubevirt.virtctl.vnc import run_screenshot

        if args.name != "screenshot" or not args.screenshot_of:
            raise VirtctlError("usage: virtctl vnc screenshot NAME --file FILE (or virtctl vnc NAME)")
        await run_screenshot(api, namespace, args.screenshot_of, args.file, move_cursor=args.move_cursor)
    elif command == "usbredir":
        from pykubevirt.virtctl.usbredir import run_usbredir

        await run_usbredir(api, namespace, args)
    elif command == "vnc":
        from pykubevirt.virtctl.vnc import run_vnc

        await run_vnc(
            api,
            namespace,
            args.name,
            address=args.address,
            port=args.port,
            proxy_only=args.proxy_only,
            preserve_session=args.preserve_session,
        )


async def _start(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    body = _dry_run(args.dry_run, {"paused": True} if args.paused else {})
    try:
        await put_subresource(client, namespace, "virtualmachines", args.name, "start", body)
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"Error starting VirtualMachine {error_message(exc)}") from exc
    print(f"VM {args.name} was scheduled to start")


async def _stop_or_restart(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    command = args.command
    body = _dry_run(args.dry_run, {})
    if (args.grace_period is not None) != args.force:
        raise VirtctlError(FORCE_AND_GRACE)
    verb = "stopping" if command == "stop" else "restarting"
    error = f"error {verb} VirtualMachine %s" if command == "stop" else f"error {verb} VirtualMachine: %s"
    if args.force:
        body["gracePeriod" if command == "stop" else "gracePeriodSeconds"] = args.grace_period
        error = f"error force {verb} VirtualMachine: %s"
    try:
        await put_subresource(client, namespace, "virtualmachines", args.name, command, body)
    except (ApiError, OSError) as exc:
        raise VirtctlError(error % error_message(exc)) from exc
    print(f"VM {args.name} was scheduled to {command}")


async def _pause_or_unpause(client: KubeClient, namespace: str, command: str, args: argparse.Namespace) -> None:
    kind, name = args.type.lower(), args.name
    if kind not in VM_TYPES + VMI_TYPES:
        raise VirtctlError(f'unsupported resource type "{args.type}": use vm or vmi')
    body = _dry_run(args.dry_run, {})
    verb = "pausing" if command == "pause" else "unpausing"
    vm = None
    if kind in VM_TYPES:
        # The VMI of a VM has the VM's name; reading the VM first tells a stopped VM from a missing one.
        try:
            vm = await client.get(VIRTUAL_MACHINES, name, namespace)
        except (ApiError, OSError) as exc:
            raise VirtctlError(f"Error getting VirtualMachine {name}: {error_message(exc)}") from exc
    try:
        await put_subresource(client, namespace, "virtualmachineinstances", name, command, body)
    except NotFound as exc:
        if vm is not None and command == "pause":
            raise VirtctlError(_pause_not_found(vm, name)) from exc
        raise VirtctlError(f"Error {verb} VirtualMachineInstance {name}: {error_message(exc)}") from exc
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"Error {verb} VirtualMachineInstance {name}: {error_message(exc)}") from exc
    print(f"VMI {name} was scheduled to {command}")


def _pause_not_found(vm: dict[str, Any], name: str) -> str:
    try:
        strategy = run_strategy(vm)
    except RunStrategyError as exc:
        return f"Error pausing VirtualMachineInstance {name}: {exc}"
    if strategy == "Halted":
        return f"Error pausing VirtualMachineInstance {name}. VirtualMachine {name} is not set to run"
    return f"Error pausing VirtualMachineInstance {name}, it was not found"


async def _version(client: KubeClient | None, client_only: bool) -> None:
    print(f"Client Version: {format_version(version_info())}")
    if client_only:
        return
    try:
        server = await server_version(_need(client))
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"failed to get server version: {error_message(exc)}") from exc
    print(f"Server Version: {format_version(server)}")
