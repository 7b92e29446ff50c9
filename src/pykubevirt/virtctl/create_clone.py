"""`virtctl create clone` (pkg/virtctl/create/clone/clone.go): a VirtualMachineClone manifest from flags."""

from __future__ import annotations

import argparse
from typing import Any

from pykubevirt.api.constants import (
    CLONE_API_VERSION,
    KUBEVIRT_GROUP,
    SNAPSHOT_GROUP,
    VM_CLONE_KIND,
    VM_KIND,
    VM_SNAPSHOT_KIND,
)
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.create_params import random_suffix

SUPPORTED_SOURCE_TYPES = "vm, vmsnapshot"
SUPPORTED_TARGET_TYPES = "vm"
# The spellings upstream's switch accepts, exactly (no case folding).
VM_TYPES = ("vm", "VM", VM_KIND, "virtualmachine")
SNAPSHOT_TYPES = ("snapshot", VM_SNAPSHOT_KIND, "vmsnapshot", "VMSnapshot")
_MULTIPLE = "Can be provided multiple times."


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    """Upstream's flags and help texts; the filter flags are string arrays, one value a use."""
    cmd.add_argument(
        "--name", default="", help="Specify the name of the clone. If not specified, name would be randomized."
    )
    # Required as cobra's MarkFlagRequired: None tells "not given" from "given empty".
    cmd.add_argument("--source-name", default=None, help="Specify the clone's source name.")
    cmd.add_argument("--target-name", default="", help="Specify the clone's target name.")
    cmd.add_argument(
        "--source-type",
        default="",
        help=f"Specify the clone's source type. Default type is VM. Supported types: {SUPPORTED_SOURCE_TYPES}",
    )
    cmd.add_argument(
        "--target-type",
        default="",
        help=f"Specify the clone's target type. Default type is VM. Supported types: {SUPPORTED_TARGET_TYPES}",
    )
    for flag, what in (
        ("label-filter", "label filters"),
        ("annotation-filter", "annotation filters"),
        ("template-label-filter", "template label filters"),
        ("template-annotation-filter", "template annotation filters"),
    ):
        cmd.add_argument(f"--{flag}", action="append", default=[], help=f"Specify clone's {what}. {_MULTIPLE}")
    cmd.add_argument(
        "--new-mac-address",
        action="append",
        default=[],
        help="Specify clone's new mac addresses. For example: 'interfaceName0:newAddress0'",
    )
    cmd.add_argument("--new-smbios-serial", default="", help="Specify the clone's new smbios serial")


def _reference(given_type: str, name: str, *, source: bool) -> dict[str, Any]:
    """typeToTypedLocalObjectReference: a source may be a VM or a snapshot, a target only a VM."""
    if given_type in VM_TYPES:
        return {"apiGroup": KUBEVIRT_GROUP, "kind": VM_KIND, "name": name}
    if given_type in SNAPSHOT_TYPES and source:
        return {"apiGroup": SNAPSHOT_GROUP, "kind": VM_SNAPSHOT_KIND, "name": name}
    which, supported = ("source", SUPPORTED_SOURCE_TYPES) if source else ("target", SUPPORTED_TARGET_TYPES)
    raise VirtctlError(f"{which} type {given_type} is not supported. Supported types: {supported}")


def _mac_addresses(params: list[str]) -> dict[str, str]:
    """withNewMacAddresses: `interface:address`, split on every ":", so a colon-separated MAC cannot be given."""
    addresses: dict[str, str] = {}
    for param in params:
        parts = param.split(":")
        if len(parts) != 2:
            raise VirtctlError(
                f"newMacAddress parameter {param} is invalid: exactly one ':' is expected. "
                "For example: 'interface0:address0'"
            )
        interface, address = parts
        if not interface:
            raise VirtctlError(f"newMacAddress parameter {param} has empty interface name")
        if not address:
            raise VirtctlError(f"newMacAddress parameter {param} has empty address name")
        addresses[interface] = address
    return addresses


def clone_manifest(args: argparse.Namespace, namespace: str | None) -> dict[str, Any]:
    """The clone as upstream prints it, checks in its order; `namespace` is -n when it was given."""
    if args.source_name is None:
        raise VirtctlError('required flag(s) "source-name" not set')
    name = args.name or f"clone-{random_suffix()}"
    if not args.source_name:
        raise VirtctlError("source name must not be empty")
    source = _reference(args.source_type or "vm", args.source_name, source=True)
    target = _reference(args.target_type or "vm", args.target_name, source=False)
    # Go's encoding: empty filter lists are left out, the template struct never is.
    spec: dict[str, Any] = {"source": source, "target": target, "template": {}}
    for flag, key, holder in (
        ("annotation_filter", "annotationFilters", spec),
        ("label_filter", "labelFilters", spec),
        ("template_annotation_filter", "annotationFilters", spec["template"]),
        ("template_label_filter", "labelFilters", spec["template"]),
    ):
        if getattr(args, flag):
            holder[key] = list(getattr(args, flag))
    if args.new_smbios_serial:
        spec["newSMBiosSerial"] = args.new_smbios_serial
    macs = _mac_addresses(args.new_mac_address)
    if macs:
        spec["newMacAddresses"] = macs
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": CLONE_API_VERSION, "kind": VM_CLONE_KIND, "metadata": metadata, "spec": spec, "status": {}}
