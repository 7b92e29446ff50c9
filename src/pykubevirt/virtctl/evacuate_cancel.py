"""`virtctl evacuate-cancel vm|vmi NAME`: the VMI is marked for evacuation no more (virt-api's evacuate/cancel)."""

from __future__ import annotations

import argparse

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import VIRTUAL_MACHINE_INSTANCES
from pykubevirt.virtctl.client import VirtctlError, error_message, put_subresource

# evacuate-cancel's kinds, as KubeVirt's virtctl names them.
VM_KIND = ("virtualmachines", "VM")
VMI_KIND = ("virtualmachineinstances", "VMI")
EVACUATE_CANCEL_KINDS = {
    **dict.fromkeys(("vm", "vms", "virtualmachine", "virtualmachines"), VM_KIND),
    **dict.fromkeys(("vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances"), VMI_KIND),
}


async def run(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    """Cancel with the node the VMI reports, so that a newer evacuation from another node stays."""
    kind = EVACUATE_CANCEL_KINDS.get(args.kind.lower())
    if kind is None:
        raise VirtctlError(f'unsupported resource type "{args.kind}"')
    resource, label = kind
    where = f"{namespace}/{args.name}"
    try:
        vmi = await client.get(VIRTUAL_MACHINE_INSTANCES, args.name, namespace)
    except (ApiError, OSError) as exc:
        message = f"error retrieving VMI for evacuation cancel for {label} {where}: {error_message(exc)}"
        raise VirtctlError(message) from exc
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
        raise VirtctlError(f"error canceling evacuation for {label} {where}: {error_message(exc)}") from exc
    print(f"{label} {where} was canceled evacuation")
