"""`virtctl create instancetype` and `virtctl create preference` (pkg/virtctl/create/{instancetype,preference}):
cluster-wide manifests unless --namespaced (or -n) asks for namespaced ones."""

from __future__ import annotations

import argparse
from typing import Any

from pykubevirt.api.quantity import Quantity, QuantityError
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.create_params import ParamKind, flag_error, map_params, random_suffix

API_VERSION = "instancetype.kubevirt.io/v1beta1"
DEVICE_PARAMS: dict[str, ParamKind] = {"name": "string", "devicename": "string"}
CPU_TOPOLOGIES = (
    *("preferSockets", "preferCores", "preferThreads", "preferSpread", "preferAny"),
    *("sockets", "cores", "threads", "spread", "any"),
)


def _object(kind: str, args: argparse.Namespace, namespace: str | None, prefix: str) -> dict[str, Any]:
    """The object's kind and metadata: namespaced when asked or when -n was given, as upstream decides."""
    namespaced = bool(args.namespaced) or namespace is not None
    name = args.name if args.name is not None else f"{'' if namespaced else 'cluster'}{prefix}-{random_suffix()}"
    metadata: dict[str, Any] = {"name": name}
    if namespaced and namespace:
        metadata["namespace"] = namespace
    full_kind = f"VirtualMachine{kind}" if namespaced else f"VirtualMachineCluster{kind}"
    return {"apiVersion": API_VERSION, "kind": full_kind, "metadata": metadata}


def instancetype_manifest(args: argparse.Namespace, namespace: str | None) -> dict[str, Any]:
    missing = [f'"{flag}"' for flag in ("cpu", "memory") if getattr(args, flag) is None]
    if missing:
        raise VirtctlError(f"required flag(s) {', '.join(missing)} not set")
    try:
        memory = str(Quantity.parse(args.memory))
    except QuantityError as exc:
        raise VirtctlError(str(exc)) from None
    if args.cpu <= 0:
        raise VirtctlError("cpu value must be greater than zero")
    spec: dict[str, Any] = {"cpu": {"guest": args.cpu}, "memory": {"guest": memory}}
    for flag, key in (("gpu", "gpus"), ("hostdevice", "hostDevices")):
        for value in getattr(args, flag):
            params = map_params(flag, value, DEVICE_PARAMS)
            if not params.get("name"):
                raise flag_error(flag, "name must be specified")
            if not params.get("devicename"):
                raise flag_error(flag, "deviceName must be specified")
            spec.setdefault(key, []).append({"deviceName": params["devicename"], "name": params["name"]})
    if args.iothreadspolicy is not None:
        if args.iothreadspolicy not in ("auto", "shared"):
            raise flag_error("iothreadspolicy", "IOThread must be of value auto or shared")
        spec["ioThreadsPolicy"] = args.iothreadspolicy
    return {**_object("Instancetype", args, namespace, "instancetype"), "spec": spec}


def preference_manifest(args: argparse.Namespace, namespace: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if args.volume_storage_class is not None:
        spec["volumes"] = {"preferredStorageClassName": args.volume_storage_class} if args.volume_storage_class else {}
    if args.machine_type is not None:
        spec["machine"] = {"preferredMachineType": args.machine_type} if args.machine_type else {}
    if args.cpu_topology is not None:
        if args.cpu_topology not in CPU_TOPOLOGIES:
            raise flag_error("cpu-topology", "CPU topology must have a value of sockets, cores, threads or spread")
        spec["cpu"] = {"preferredCPUTopology": args.cpu_topology}
    return {**_object("Preference", args, namespace, "preference"), "spec": spec}


def _cpu_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f'strconv.ParseUint: parsing "{text}": invalid syntax')
    return value


def add_instancetype_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--name", default=None, help="the name (default: [cluster]instancetype-<random>)")
    cmd.add_argument("--cpu", type=_cpu_count, default=None, help="the count of CPUs (required)")
    cmd.add_argument("--memory", default=None, help="the amount of memory (required)")
    cmd.add_argument("--iothreadspolicy", default=None, help='"auto" or "shared"')
    cmd.add_argument("--namespaced", action="store_true", help="a VirtualMachineInstancetype, not a cluster one")
    cmd.add_argument("--gpu", action="append", default=[], help="a vGPU (repeatable): name:string,devicename:string")
    cmd.add_argument(
        "--hostdevice", action="append", default=[], help="a host device (repeatable): name:string,devicename:string"
    )


def add_preference_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--namespaced", action="store_true", help="a VirtualMachinePreference, not a cluster one")
    cmd.add_argument("--name", default=None, help="the name (default: [cluster]preference-<random>)")
    cmd.add_argument("--volume-storage-class", default=None, help="the preferred storage class")
    cmd.add_argument("--machine-type", default=None, help="the preferred machine type")
    cmd.add_argument("--cpu-topology", default=None, help="the preferred guest CPU topology (sockets, cores, …)")
