"""`virtctl migrate VM` and `virtctl migrate-cancel VM`, with KubeVirt's messages (pkg/virtctl/vm/migrate*.go)."""

from __future__ import annotations

import argparse
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import MIGRATIONS
from pykubevirt.virtctl.client import VirtctlError, error_message, put_subresource

FINAL = ("Succeeded", "Failed")


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
        raise VirtctlError(f"Error migrating VirtualMachine {error_message(exc)}") from exc
    print(f"VM {args.name} was scheduled to migrate")


async def migrate_cancel(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    try:
        listed = await client.list(MIGRATIONS, namespace, label_selector=f"{c.VMI_NAME_LABEL}=={args.name}")
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"Error fetching virtual machine instance migration list  {error_message(exc)}") from exc
    for migration in listed.get("items") or []:
        if (migration.get("status") or {}).get("phase") in FINAL:
            continue
        name = migration["metadata"]["name"]
        try:
            if not args.dry_run:
                await client.delete(MIGRATIONS, name, namespace)
        except (ApiError, OSError) as exc:
            raise VirtctlError(
                f"Error canceling migration {name} of a VirtualMachine {args.name}: {error_message(exc)}"
            ) from exc
        print(f"VM {args.name} was scheduled to migrate-cancel")
        return
    raise VirtctlError(f"Found no migration to cancel for {args.name}")
