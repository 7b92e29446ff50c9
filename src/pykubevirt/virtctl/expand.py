"""`virtctl expand` (pkg/virtctl/vm/expand.go): a VM with its instancetype and preference expanded, from the cluster
(`--vm NAME`) or from a manifest (`--file PATH`, `-` for stdin) that virt-api expands without storing it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.virtctl.client import SUBRESOURCES, VirtctlError, error_message, subresource_path
from pykubevirt.virtctl.manifest_yaml import render

FORMATS = ("yaml", "json")


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--vm", default="", help='the VirtualMachine to expand; excludes "--file"')
    cmd.add_argument("-f", "--file", default="", help='a manifest to expand ("-" for stdin); excludes "--vm"')
    cmd.add_argument("-o", "--output", default="yaml", help="yaml (default) or json")


def check_arguments(args: argparse.Namespace) -> None:
    """cobra's checks, in its order: the exclusive pair, then expandArgs."""
    if args.vm and args.file:
        raise VirtctlError(
            "if any flags in the group [file vm] are set none of the others can be; [file vm] were all set"
        )
    if not args.vm and not args.file:
        raise VirtctlError("error invalid arguments - VirtualMachine name or file must be provided")
    if args.output not in FORMATS:
        raise VirtctlError(f"error not supported output format defined: {args.output}")


def read_vm(path: str) -> dict[str, Any]:
    """The VM of a YAML or JSON manifest, with upstream's errors."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        what = "error reading from stdin" if path == "-" else "error reading file"
        raise VirtctlError(f"{what} open {path}: {(exc.strerror or str(exc)).lower()}") from None
    try:
        vm = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise VirtctlError(f"error decoding VirtualMachine {' '.join(str(exc).split())}") from None
    if not isinstance(vm, dict):
        raise VirtctlError("error decoding VirtualMachine: the manifest is not an object")
    return vm


def render_output(vm: dict[str, Any], output: str) -> str:
    # Go's json.MarshalIndent(vm, "", " "): one space a level, no newline at the end.
    return json.dumps(vm, indent=1) if output == "json" else render(vm)


async def run_expand(api: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    check_arguments(args)
    if args.vm:
        name, path, method, body = (
            args.vm,
            subresource_path(namespace, "virtualmachines", args.vm, "expand-spec"),
            "GET",
            None,
        )
    else:
        body = read_vm(args.file)
        name = str((body.get("metadata") or {}).get("name") or "")
        path, method = f"{SUBRESOURCES}/namespaces/{quote(namespace, safe='')}/expand-vm-spec", "PUT"
    try:
        expanded = await api.request(method, path, body=body)
    except (ApiError, OSError) as exc:
        message = error_message(exc)
        raise VirtctlError(f"error expanding VirtualMachine - {name} in namespace - {namespace}: {message}") from exc
    sys.stdout.write(render_output(expanded, args.output))
