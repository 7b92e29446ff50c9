"""`virtctl memory-dump get|download|remove VM` (pkg/virtctl/memorydump): dump a running VM's memory to a claim.

`download` (and `get --output`) waits for the dump, then downloads the claim through a VirtualMachineExport
`export-<vm>-<claim>` made for it and deleted after, as virtctl vmexport download does.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import memory_dump_size
from pykubevirt.api.memory_dump_size import DEFAULT_FS_OVERHEAD, expected_dump_size
from pykubevirt.api.quantity import Quantity
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import (
    PERSISTENT_VOLUME_CLAIMS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
    ResourceRef,
)
from pykubevirt.virtctl import vmexport
from pykubevirt.virtctl.client import VirtctlError, error_message, put_subresource
from pykubevirt.virtctl.image_upload import open_error
from pykubevirt.virtctl.vmexport_args import (
    DEFAULT_READINESS_TIMEOUT,
    DOWNLOAD,
    PORT_FORWARD_NOT_SUPPORTED,
    RAW_FORMAT,
    VMExportInfo,
)

CDI_CONFIGS = ResourceRef(c.CDI_GROUP, c.CDI_VERSION, "cdiconfigs", "CDIConfig", namespaced=False)
CDI_CONFIG_NAME = "config"
# KubeVirt's two retries ride out an exporter pod made just as the dump's hotplug pod goes (CNV-39141).
DOWNLOAD_RETRIES = 2
APPLY_STORAGE_PROFILE = "cdi.kubevirt.io/applyStorageProfile"
FS_OVERHEAD_MESSAGE = "Using default 5.5% filesystem overhead for pvc size"
WAIT_INTERVAL = 2.0
WAIT_TIMEOUT = 600.0
READ_WRITE_MODES = ("ReadWriteOnce", "ReadWriteMany")

MISSING_CLAIM_NAME = "missing claim name"
MISSING_OUTPUT = "missing outputFile to download the memory dump"
ALREADY_ASSOCIATED = "please remove current memory dump association before creating a new claim for a new memory dump"
READ_ONLY_CLAIM = "cannot dump memory to a readonly pvc, use either ReadWriteOnce or ReadWriteMany if supported"
INVALID_ACCESS_MODE = "invalid access mode, use either ReadWriteOnce or ReadWriteMany if supported"
NO_CLAIM_ON_REQUEST = "claim name not on vm memory dump request"
WAIT_TIMED_OUT = "timed out waiting for the condition"


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    # One list, checked by check_args: cobra's ExactArgs(2) counts them, wherever they stand among the flags.
    cmd.add_argument("positionals", nargs="*", metavar="get/download/remove VM")
    cmd.add_argument("--claim-name", default="", help="pvc name to contain the memory dump")
    cmd.add_argument("--create-claim", action="store_true", help="Create the pvc that will contain the memory dump")
    cmd.add_argument(
        "--port-forward",
        action="store_true",
        help="Configure and set port-forward in a random port to download the memory dump",
    )
    cmd.add_argument("--format", default="", help="Specifies the format of the memory dump download (gzipped or raw).")
    cmd.add_argument("--local-port", default="0", help="Specify port for port-forward")
    cmd.add_argument("--storage-class", default="", help="The storage class for the PVC.")
    cmd.add_argument("--access-mode", default="", help="The access mode for the PVC.")
    cmd.add_argument("--output", default="", help="Specifies the output path of the memory dump to be downloaded.")


def check_args(args: argparse.Namespace) -> None:
    """cobra.ExactArgs(2), checked before the client is built as cobra does."""
    count = len(args.positionals)
    if count != 2:
        raise VirtctlError(f"accepts 2 arg(s), received {count}")


# ------------------------------------------------------------------------------------------------ sizes and claim


def size_with_overhead(size: Quantity, overhead: str) -> Quantity:
    try:
        return memory_dump_size.size_with_overhead(size, overhead)
    except ValueError as exc:
        raise VirtctlError(f"failed to parse filesystem overhead as float: {exc}") from None


def filesystem_overhead(cdi_config: dict[str, Any], storage_class: str) -> str:
    """GetFilesystemOverhead for a filesystem claim: the class's overhead in CDIConfig's status, else its global one."""
    overheads = (cdi_config.get("status") or {}).get("filesystemOverhead")
    if overheads is None:
        raise VirtctlError("CDI config not initialized")
    per_class = overheads.get("storageClass") or {}
    if storage_class and storage_class in per_class:
        return str(per_class[storage_class])
    return str(overheads.get("global") or "")


def claim_manifest(name: str, namespace: str, size: Quantity, storage_class: str, access_mode: str) -> dict[str, Any]:
    """The claim `--create-claim` makes: CDI's storage profile fills in what the flags leave out."""
    if access_mode == "ReadOnlyMany":
        raise VirtctlError(READ_ONLY_CLAIM)
    if access_mode and access_mode not in READ_WRITE_MODES:
        raise VirtctlError(INVALID_ACCESS_MODE)
    spec: dict[str, Any] = {
        "accessModes": [access_mode or "ReadWriteOnce"],
        "resources": {"requests": {"storage": str(size)}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": {APPLY_STORAGE_PROFILE: "true"}},
        "spec": spec,
    }


def already_exists(namespace: str, name: str) -> str:
    return f"PVC {namespace}/{name} already exists, check if it should be created if not remove create flag"


def claim_created(namespace: str, name: str) -> str:
    return f"PVC {namespace}/{name} created"


def dump_submitted(vm: str) -> str:
    return f"Successfully submitted memory dump request of VM {vm}"


def removal_submitted(vm: str) -> str:
    return f"Successfully submitted remove memory dump association of VM {vm}"


def dump_failed(vm: str, message: str) -> str:
    return f"memory dump of VM {vm} failed: {message}" if message else f"memory dump of VM {vm} failed"


def export_name(vm: str, claim: str) -> str:
    return f"export-{vm}-{claim}"


def download_info(namespace: str, vm: str, claim: str, args: argparse.Namespace) -> VMExportInfo:
    """The export KubeVirt's downloadMemoryDump makes: of the claim, deleted after, gunzipped with --format=raw."""
    return VMExportInfo(
        function=DOWNLOAD,
        name=export_name(vm, claim),
        namespace=namespace,
        source={"apiGroup": "", "kind": "PersistentVolumeClaim", "name": claim},
        should_create=True,
        decompress=args.format == RAW_FORMAT,
        output_file=args.output,
        retries=DOWNLOAD_RETRIES,
        readiness_timeout=DEFAULT_READINESS_TIMEOUT,
    )


# ------------------------------------------------------------------------------------------------------ the calls


async def _cdi_config(client: KubeClient) -> dict[str, Any] | None:
    # Not found covers both a missing `config` and a cluster without CDI: either way the overhead is unknown.
    return await client.get_or_none(CDI_CONFIGS, CDI_CONFIG_NAME)


async def claim_size(client: KubeClient, expected: Quantity, storage_class: str) -> Quantity:
    """calcPVCNeededSize: the expected dump plus CDI's filesystem overhead, or 5.5 % without a CDIConfig."""
    config = await _cdi_config(client)
    if config is None:
        print(FS_OVERHEAD_MESSAGE)
        return size_with_overhead(expected, DEFAULT_FS_OVERHEAD)
    return size_with_overhead(expected, filesystem_overhead(config, storage_class))


async def _create_claim(client: KubeClient, namespace: str, vm_name: str, args: argparse.Namespace) -> None:
    vm = await client.get(VIRTUAL_MACHINES, vm_name, namespace)
    if (vm.get("status") or {}).get("memoryDumpRequest") is not None:
        raise VirtctlError(ALREADY_ASSOCIATED)
    try:
        await client.get(PERSISTENT_VOLUME_CLAIMS, args.claim_name, namespace)
    except NotFound:
        pass
    else:
        raise VirtctlError(already_exists(namespace, args.claim_name))
    vmi = await client.get(VIRTUAL_MACHINE_INSTANCES, vm_name, namespace)
    size = await claim_size(client, expected_dump_size(vmi), args.storage_class)
    claim = claim_manifest(args.claim_name, namespace, size, args.storage_class, args.access_mode)
    await client.create(PERSISTENT_VOLUME_CLAIMS, claim, namespace)
    print(claim_created(namespace, args.claim_name))


async def _get(client: KubeClient, namespace: str, vm_name: str, args: argparse.Namespace) -> None:
    if args.output and args.port_forward:
        # Refused before the dump is asked for, since its download could not happen.
        raise VirtctlError(PORT_FORWARD_NOT_SUPPORTED)
    if args.create_claim:
        if not args.claim_name:
            raise VirtctlError(MISSING_CLAIM_NAME)
        await _create_claim(client, namespace, vm_name, args)
    # An empty claim name is sent as is: virt-api then dumps again to the claim the VM already has.
    try:
        await put_subresource(
            client, namespace, "virtualmachines", vm_name, "memorydump", {"claimName": args.claim_name}
        )
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"error dumping vm memory, {error_message(exc)}") from exc
    print(dump_submitted(vm_name))
    if args.output:
        await _download(client, namespace, vm_name, args)


async def wait_for_dump(
    client: KubeClient,
    namespace: str,
    vm_name: str,
    interval: float = WAIT_INTERVAL,
    wait_seconds: float = WAIT_TIMEOUT,
) -> dict[str, Any]:
    """The VM's memoryDumpRequest once Completed; polled at once, then every `interval` for `wait_seconds`.

    A Failed dump ends the wait with its message (KubeVirt would keep polling it until the timeout).
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        vm = await client.get(VIRTUAL_MACHINES, vm_name, namespace)
        request = (vm.get("status") or {}).get("memoryDumpRequest")
        if request is not None:
            phase = str(request.get("phase") or "")
            if phase == "Completed":
                print("Memory dump completed successfully")
                return dict(request)
            if phase == "Failed":
                raise VirtctlError(dump_failed(vm_name, str(request.get("message") or "")))
            claim = request.get("claimName") or ""
            print(f"Waiting for memorydump {claim} to complete, current phase: {phase}...")
        if time.monotonic() + interval > deadline:
            raise VirtctlError(WAIT_TIMED_OUT)
        await asyncio.sleep(interval)


async def _download(client: KubeClient, namespace: str, vm_name: str, args: argparse.Namespace) -> None:
    if not args.output:
        raise VirtctlError(MISSING_OUTPUT)
    if args.port_forward:
        raise VirtctlError(PORT_FORWARD_NOT_SUPPORTED)
    request = await wait_for_dump(client, namespace, vm_name, WAIT_INTERVAL, WAIT_TIMEOUT)
    claim = str(request.get("claimName") or "")
    if not claim:
        raise VirtctlError(NO_CLAIM_ON_REQUEST)
    info = download_info(namespace, vm_name, claim, args)
    try:
        info.output = await asyncio.to_thread(open, args.output, "wb")
    except OSError as exc:
        raise VirtctlError(open_error(args.output, exc)) from None
    try:
        await vmexport.download(client, info)
    finally:
        info.close()


async def _remove(client: KubeClient, namespace: str, vm_name: str) -> None:
    try:
        await put_subresource(client, namespace, "virtualmachines", vm_name, "removememorydump", {})
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"error removing memory dump association, {error_message(exc)}") from exc
    print(removal_submitted(vm_name))


async def run(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    action, vm_name = args.positionals
    if action == "get":
        await _get(client, namespace, vm_name, args)
    elif action == "download":
        await _download(client, namespace, vm_name, args)
    elif action == "remove":
        await _remove(client, namespace, vm_name)
    else:
        raise VirtctlError(f"invalid action type {action}")
