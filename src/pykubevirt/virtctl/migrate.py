"""`virtctl migrate VM` and `virtctl migrate-cancel VM`, with KubeVirt's messages (pkg/virtctl/vm/migrate*.go)."""

from __future__ import annotations

import argparse
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import MIGRATIONS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.virtctl.client import VirtctlError, put_subresource

FINAL = ("Succeeded", "Failed")


def _message(exc: BaseException) -> str:
    return exc.message if isinstance(exc, ApiError) else str(exc)


def node_selector(text: str) -> dict[str, str]:
    """`k=v,k2=v2` as --addedNodeSelector takes it."""
    selector = {}
    for part in filter(None, text.split(",")):
        key, sep, value = part.partition("=")
        if not sep:
            raise VirtctlError(f"Error migrating VirtualMachine invalid node selector {part!r}: expected key=value")
        selector[key.strip()] = value.strip()
    return selector


async def migrate(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    body: dict[str, Any] = {}
    if args.addedNodeSelector:
        body["addedNodeSelector"] = node_selector(args.addedNodeSelector)
    if args.dry_run:
        body["dryRun"] = ["All"]
    try:
        await put_subresource(client, namespace, "virtualmachines", args.name, "migrate", body)
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"Error migrating VirtualMachine {_message(exc)}") from exc
    print(f"VM {args.name} was scheduled to migrate")


async def migrate_cancel(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    try:
        listed = await client.list(MIGRATIONS, namespace, label_selector=f"{c.VMI_NAME_LABEL}=={args.name}")
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"Error fetching virtual machine instance migration list  {_message(exc)}") from exc
    for migration in listed.get("items") or []:
        if (migration.get("status") or {}).get("phase") in FINAL:
            continue
        name = migration["metadata"]["name"]
        try:
            if not args.dry_run:
                await client.delete(MIGRATIONS, name, namespace)
        except (ApiError, OSError) as exc:
            raise VirtctlError(
                f"Error canceling migration {name} of a VirtualMachine {args.name}: {_message(exc)}"
            ) from exc
        print(f"VM {args.name} was scheduled to migrate-cancel")
        return
    raise VirtctlError(f"Found no migration to cancel for {args.name}")


# evacuate-cancel's kinds, as KubeVirt's virtctl names them.
VM_KIND = ("virtualmachines", "VM")
VMI_KIND = ("virtualmachineinstances", "VMI")
EVACUATE_CANCEL_KINDS = {
    **dict.fromkeys(("vm", "vms", "virtualmachine", "virtualmachines"), VM_KIND),
    **dict.fromkeys(("vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances"), VMI_KIND),
}


async def evacuate_cancel(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    """`virtctl evacuate-cancel vm|vmi NAME`: the VMI is no longer migrated off the node it runs on."""
    kind = EVACUATE_CANCEL_KINDS.get(args.kind.lower())
    if kind is None:
        raise VirtctlError(f'unsupported resource type "{args.kind}"')
    resource, label = kind
    where = f"{namespace}/{args.name}"
    try:
        vmi = await client.get(VIRTUAL_MACHINE_INSTANCES, args.name, namespace)
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"error retrieving VMI for evacuation cancel for {label} {where}: {_message(exc)}") from exc
    node = (vmi.get("status") or {}).get("nodeName")
    if not node:
        raise VirtctlError(f"{label} {where} doesn't report Node name")
    body: dict[str, object] = {"kind": "EvacuateCancelOptions", "apiVersion": c.KUBEVIRT_API_VERSION}
    body["evacuationNodeName"] = node
    if args.dry_run:
        print("Dry Run execution")
        body["dryRun"] = ["All"]
    try:
        await put_subresource(client, namespace, resource, args.name, "evacuate/cancel", body)
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"error canceling evacuation for {label} {where}: {_message(exc)}") from exc
    print(f"{label} {where} was canceled evacuation")
