"""`virtctl addvolume` and `removevolume` (pkg/virtctl/vm/{add,remove}_volume.go).

With `--persist` the request goes to the VM (its template keeps the volume, and its running VMI gets it too);
without, to the VMI alone, so the volume is gone at the next restart (KubeVirt's HotplugVolumes behaviour).
"""

from __future__ import annotations

import argparse
import asyncio
import random
from typing import Any

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, Conflict, NotFound
from pykubevirt.client.resources import DATA_VOLUMES, PERSISTENT_VOLUME_CLAIMS
from pykubevirt.virtctl.client import VirtctlError, error_message, put_subresource

MAX_RETRIES = 15
DNS1035_LABEL_MAX = 63
CACHE_MODES = ("none", "writethrough", "writeback")


def add_arguments(sub: Any, command: Any) -> None:
    """Register both commands on the parser; `command(name, help, *positionals)` adds one."""
    add = command("addvolume", "add a volume to a running VM", "name")
    add.add_argument("--volume-name", required=True, help="name of the volume source, either DV or PVC")
    add.add_argument("--disk-name", default="", help="name used in the disk/volume section of spec")
    add.add_argument("--serial", default="", help="serial number you want to assign to the disk")
    add.add_argument("--cache", default="", help="caching options attribute control the cache mechanism")
    add.add_argument("--disk-type", default="disk", help="specifies disk type to be hotplugged (disk/lun)")
    add.add_argument("--bus", default="scsi", help="specifies disk bus. scsi by default.")
    remove = command("removevolume", "remove a volume from a running VM", "name")
    remove.add_argument("--volume-name", required=True, help="name used in volumes section of spec")
    for cmd in (add, remove):
        cmd.add_argument("--persist", action="store_true", help="also change the VM's spec (if it exists)")
        cmd.add_argument("--dry-run", action="store_true", help="validate only, change nothing")


async def _volume_source(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """A DataVolume of that name, else a PVC; the volume is hotpluggable either way."""
    try:
        await client.get(DATA_VOLUMES, name, namespace)
        return {"dataVolume": {"name": name, "hotpluggable": True}}
    except (NotFound, ApiError):
        pass
    try:
        await client.get(PERSISTENT_VOLUME_CLAIMS, name, namespace)
        return {"persistentVolumeClaim": {"claimName": name, "hotpluggable": True}}
    except (NotFound, ApiError) as exc:
        raise VirtctlError(f"error adding volume, Volume {name} is not a DataVolume or PersistentVolumeClaim") from exc


def add_options(args: argparse.Namespace, source: dict[str, Any]) -> dict[str, Any]:
    """AddVolumeOptions from the flags, checked as virtctl checks them."""
    name = args.disk_name or args.volume_name
    if len(name) > DNS1035_LABEL_MAX:
        if args.disk_name:
            raise VirtctlError(f"Invalid disk name {args.disk_name}, must not exceed {DNS1035_LABEL_MAX} characters")
        raise VirtctlError(
            f"Invalid volume name {args.volume_name}, must not exceed {DNS1035_LABEL_MAX} characters. "
            "Use in conjunction with --disk-name to specify a shorter name"
        )
    disk: dict[str, Any] = {"name": name}
    if args.disk_type == "disk":
        if args.bus not in ("scsi", "virtio"):
            raise VirtctlError(f"Invalid bus type '{args.bus}' for disk. Only 'scsi' and 'virtio' are supported.")
        disk["disk"] = {"bus": args.bus}
    elif args.disk_type == "lun":
        if args.bus != "scsi":
            raise VirtctlError(f"Invalid bus type '{args.bus}' for LUN disk. Only 'scsi' bus is supported.")
        disk["lun"] = {"bus": args.bus}
    else:
        raise VirtctlError(f"Invalid disk type '{args.disk_type}'. Only LUN and Disk are supported.")
    disk["serial"] = args.serial or name
    if args.cache:
        if args.cache not in CACHE_MODES:
            raise VirtctlError(f"error adding volume, invalid cache value {args.cache}")
        disk["cache"] = args.cache
    options: dict[str, Any] = {"name": name, "disk": disk, "volumeSource": source}
    if args.dry_run:
        options["dryRun"] = ["All"]
    return options


async def _submit(
    client: KubeClient, namespace: str, args: argparse.Namespace, action: str, body: dict[str, Any]
) -> None:
    """PUT to the VM (with --persist) or the VMI, retrying a request that lost a race with another change."""
    resource = "virtualmachines" if args.persist else "virtualmachineinstances"
    verb = "adding" if action == "addvolume" else "removing"
    for attempt in range(1, MAX_RETRIES + 1):
        try:
            await put_subresource(client, namespace, resource, args.name, action, body)
            return
        except (ApiError, OSError) as exc:
            if isinstance(exc, Conflict) and "testing value" in exc.message:
                # Another change to the volumes won the race; read again and retry, as virtctl does.
                await asyncio.sleep(attempt * random.randint(0, 4) / 1000)
                continue
            message = error_message(exc)
            raise VirtctlError(f"error {verb} volume, {message}") from exc
    raise VirtctlError(f"error {verb} volume after {MAX_RETRIES} retries")


async def add_volume(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    source = await _volume_source(client, namespace, args.volume_name)
    options = add_options(args, source)
    if args.dry_run:
        print("Dry Run execution")
    await _submit(client, namespace, args, "addvolume", options)
    print(f"Successfully submitted add volume request to VM {args.name} for volume {args.volume_name}")


async def remove_volume(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    options: dict[str, Any] = {"name": args.volume_name}
    if args.dry_run:
        print("Dry Run execution")
        options["dryRun"] = ["All"]
    await _submit(client, namespace, args, "removevolume", options)
    print(f"Successfully submitted remove volume request to VM {args.name} for volume {args.volume_name}")
