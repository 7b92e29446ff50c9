"""`virtctl create vm|instancetype|preference|clone` (pkg/virtctl/create): manifests printed for `kubectl apply -f -`.

Nothing is sent to the cluster, so no kubeconfig is needed; -n, when given, becomes the manifest's namespace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from pykubevirt.virtctl.create_clone import add_arguments as add_clone_arguments
from pykubevirt.virtctl.create_clone import clone_manifest
from pykubevirt.virtctl.create_types import (
    add_instancetype_arguments,
    add_preference_arguments,
    instancetype_manifest,
    preference_manifest,
)
from pykubevirt.virtctl.create_vm import VMManifest, flags_from
from pykubevirt.virtctl.create_vm import add_arguments as add_vm_arguments
from pykubevirt.virtctl.manifest_yaml import render


def add_commands(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    parser_class: type[argparse.ArgumentParser],
    add_globals: Callable[[argparse.ArgumentParser], None],
) -> None:
    create = sub.add_parser("create", help="Create a manifest for the specified Kind.")
    add_globals(create)
    kinds = create.add_subparsers(dest="kind", metavar="KIND", parser_class=parser_class)
    kinds.required = True
    for name, help_text, add in (
        ("vm", "Create a VirtualMachine manifest.", add_vm_arguments),
        (
            "instancetype",
            "Create VirtualMachineInstancetype or VirtualMachineClusterInstancetype manifest.",
            add_instancetype_arguments,
        ),
        (
            "preference",
            "Create a VirtualMachinePreference or VirtualMachineClusterPreference manifest.",
            add_preference_arguments,
        ),
        ("clone", "Create a clone object manifest", add_clone_arguments),
    ):
        cmd = kinds.add_parser(name, help=help_text)
        add_globals(cmd)
        add(cmd)


def run(args: argparse.Namespace) -> None:
    """Print the manifest; warnings go to stderr so the output can be piped to kubectl."""
    namespace = args.namespace
    if args.kind == "vm":
        flags = flags_from(args, namespace)
        try:
            manifest = VMManifest(flags).build()
        finally:
            for warning in flags.warnings:
                print(warning, file=sys.stderr)
    elif args.kind == "clone":
        manifest = clone_manifest(args, namespace)
    elif args.kind == "instancetype":
        manifest = instancetype_manifest(args, namespace)
    else:
        manifest = preference_manifest(args, namespace)
    sys.stdout.write(render(manifest))
