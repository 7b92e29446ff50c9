"""`virtctl objectgraph NAME [--vmi]`: what a VM (or VMI) depends on, from virt-api's objectgraph subresource."""

from __future__ import annotations

import argparse
import json

import yaml

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.virtctl.client import VirtctlError, error_message, subresource_path


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("name")
    cmd.add_argument("--vmi", action="store_true", help="the graph of the VMI instead of the VM")
    cmd.add_argument("--exclude-optional", action="store_true", help="leave out optional nodes")
    cmd.add_argument(
        "--selector", default="", help="key=value,... the nodes' labels must match (kubevirt.io/dependency-type)"
    )
    cmd.add_argument("--output", "-o", default="json", help="json or yaml")


def _selector(text: str) -> dict[str, str]:
    """cobra's StringToString: key=value pairs separated by commas, the last value of a key winning."""
    labels: dict[str, str] = {}
    for pair in filter(None, text.split(",")):
        key, sep, value = pair.partition("=")
        if not sep:
            message = f'invalid argument "{text}" for "--selector" flag: {pair} must be formatted as key=value'
            raise VirtctlError(message)
        labels[key] = value
    return labels


async def run(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    if args.output not in ("json", "yaml"):
        raise VirtctlError(f"unsupported output format: {args.output} (must be 'json' or 'yaml')")
    options: dict[str, object] = {"includeOptionalNodes": not args.exclude_optional}
    labels = _selector(args.selector)
    if labels:
        options["labelSelector"] = {"matchLabels": labels}
    resource, kind = ("virtualmachines", "VirtualMachine")
    if args.vmi:
        resource, kind = ("virtualmachineinstances", "VirtualMachineInstance")
    path = subresource_path(namespace, resource, args.name, "objectgraph")
    try:
        graph = await client.request("GET", path, body=options)
    except (ApiError, OSError) as exc:
        message = error_message(exc)
        raise VirtctlError(f"error listing object graph of {kind} {args.name}: {message}") from exc
    if args.output == "json":
        print(json.dumps(graph, indent=2))
    else:
        print(yaml.safe_dump(graph, sort_keys=True, default_flow_style=False))
