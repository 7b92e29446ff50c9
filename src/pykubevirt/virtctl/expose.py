"""`virtctl expose (vmi|vm|vmirs) NAME --name=SVC [--port=…]` (pkg/virtctl/expose): a Service selecting the launcher
pod by `vmi.kubevirt.io/id` (a VMI replica set's matchLabels), owned by the exposed object.
"""

from __future__ import annotations

import argparse
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.vmi_id import vmi_id
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import (
    SERVICES,
    VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from pykubevirt.virtctl.client import VirtctlError, error_message

VMI_KINDS = ("vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances")
VM_KINDS = ("vm", "vms", "virtualmachine", "virtualmachines")
VMIRS_KINDS = ("vmirs", "vmirss", "virtualmachineinstancereplicaset", "virtualmachineinstancereplicasets")
SERVICE_TYPES = {"clusterip": "ClusterIP", "nodeport": "NodePort", "loadbalancer": "LoadBalancer"}
IP_FAMILIES = {
    "": [],
    "ipv4": ["IPv4"],
    "ipv6": ["IPv6"],
    "ipv4,ipv6": ["IPv4", "IPv6"],
    "ipv6,ipv4": ["IPv6", "IPv4"],
}
IP_FAMILY_POLICIES = {
    "singlestack": "SingleStack",
    "preferdualstack": "PreferDualStack",
    "requiredualstack": "RequireDualStack",
}


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("type", metavar="TYPE")
    cmd.add_argument("name", metavar="NAME")
    cmd.add_argument("--name", dest="service_name", required=True, help="name of the service created")
    cmd.add_argument("--cluster-ip", default="", help="ClusterIP of the service; empty allocates one, None: headless")
    cmd.add_argument("--external-ip", default="", help="an additional external IP the service accepts")
    cmd.add_argument("--port", type=int, default=0, help="the port the service serves on")
    cmd.add_argument("--protocol", default="TCP", help="the network protocol of the service")
    cmd.add_argument("--target-port", default="", help="name or number of the port on the VM")
    cmd.add_argument("--type", dest="service_type", default="ClusterIP", help="ClusterIP, NodePort or LoadBalancer")
    cmd.add_argument("--port-name", default="", help="name of the port")
    cmd.add_argument("--ip-family", default="", help="IPv4, IPv6, IPv4,IPv6 or IPv6,IPv4")
    cmd.add_argument("--ip-family-policy", default="", help="SingleStack, PreferDualStack or RequireDualStack")


def convert_protocol(text: str) -> str:
    if text.lower() in ("tcp", "udp"):
        return text.upper()
    raise VirtctlError(f"unknown protocol: {text}")


def convert_service_type(text: str) -> str:
    if text.lower() == "externalname":
        raise VirtctlError(f"type: {text} not supported")
    if text.lower() not in SERVICE_TYPES:
        raise VirtctlError(f"unknown service type: {text}")
    return SERVICE_TYPES[text.lower()]


def convert_ip_family(text: str) -> list[str]:
    if text.lower() not in IP_FAMILIES:
        raise VirtctlError(f"unknown IPFamily/s: {text}")
    return IP_FAMILIES[text.lower()]


def convert_ip_family_policy(text: str, families: list[str]) -> str:
    if not text:
        return "PreferDualStack" if len(families) > 1 else ""
    if text.lower() not in IP_FAMILY_POLICIES:
        raise VirtctlError(f"unknown IPFamilyPolicy/s: {text}")
    return IP_FAMILY_POLICIES[text.lower()]


def int_or_string(text: str) -> int | str:
    """intstr.Parse: a number becomes an int, anything else a port name ("" stays empty: the port is used)."""
    try:
        return int(text)
    except ValueError:
        return text


def pod_network_ports(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The `ports` of the interface on the pod network, named port-1, port-2…"""
    pod_network = next((n.get("name") for n in spec.get("networks") or [] if n.get("pod") is not None), "")
    if not pod_network:
        return []
    interfaces = ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []
    for interface in interfaces:
        if interface.get("name") == pod_network:
            return [
                {"name": f"port-{i}", "protocol": port.get("protocol", ""), "port": port.get("port")}
                for i, port in enumerate(interface.get("ports") or [], start=1)
            ]
    return []


def service_manifest(
    args: argparse.Namespace, namespace: str, owner: dict[str, Any], selector: dict[str, str], ports: list[Any]
) -> dict[str, Any]:
    """The Service upstream creates, empty fields omitted as Go's omitempty does."""
    protocol = convert_protocol(args.protocol)
    service_type = convert_service_type(args.service_type)
    families = convert_ip_family(args.ip_family)
    policy = convert_ip_family_policy(args.ip_family_policy, families)
    if args.port:
        port: dict[str, Any] = {"protocol": protocol, "port": args.port}
        if args.port_name:
            port["name"] = args.port_name
        target = int_or_string(args.target_port)
        if target not in ("", 0):
            port["targetPort"] = target
        ports = [port]
    if not ports:
        raise VirtctlError("couldn't find port via --port flag or introspection")
    meta = owner["metadata"]
    owner_ref = {
        "apiVersion": owner.get("apiVersion") or f"{c.KUBEVIRT_GROUP}/v1",
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
    spec: dict[str, Any] = {"ports": [{k: v for k, v in p.items() if v} for p in ports], "selector": selector}
    spec["type"] = service_type
    if args.cluster_ip:
        spec["clusterIP"] = args.cluster_ip
    if families:
        spec["ipFamilies"] = families
    if args.external_ip:
        spec["externalIPs"] = [args.external_ip]
    if policy:
        spec["ipFamilyPolicy"] = policy
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": args.service_name, "namespace": namespace, "ownerReferences": [owner_ref]},
        "spec": spec,
    }


async def _owner(client: KubeClient, namespace: str, kind: str, name: str) -> tuple[dict[str, Any], Any, list[Any]]:
    """The exposed object, the selector of its pods and the ports it declares."""
    if kind in VMI_KINDS:
        try:
            vmi = await client.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        except (ApiError, OSError) as exc:
            raise VirtctlError(f"error fetching VirtualMachineInstance: {error_message(exc)}") from exc
        return vmi, {c.VMI_ID_LABEL: vmi_id(name)}, pod_network_ports(vmi.get("spec") or {})
    if kind in VM_KINDS:
        try:
            vm = await client.get(VIRTUAL_MACHINES, name, namespace)
        except (ApiError, OSError) as exc:
            raise VirtctlError(f"error fetching VirtualMachine: {error_message(exc)}") from exc
        template = (vm.get("spec") or {}).get("template") or {}
        return vm, {c.VMI_ID_LABEL: vmi_id(name)}, pod_network_ports(template.get("spec") or {})
    if kind in VMIRS_KINDS:
        try:
            rs = await client.get(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, name, namespace)
        except (ApiError, OSError) as exc:
            raise VirtctlError(f"error fetching VirtualMachineInstanceReplicaSet: {error_message(exc)}") from exc
        spec = rs.get("spec") or {}
        template = spec.get("template")
        ports = pod_network_ports(template.get("spec") or {}) if isinstance(template, dict) else []
        selector = spec.get("selector") or {}
        # The Service selects the launcher pods, which carry their VMI's labels, by the set's own labels.
        if not selector.get("matchLabels"):
            raise VirtctlError("cannot expose VirtualMachineInstanceReplicaSet without any selector labels")
        if selector.get("matchExpressions"):
            raise VirtctlError("cannot expose VirtualMachineInstanceReplicaSet with match expressions")
        return rs, dict(selector["matchLabels"]), ports
    raise VirtctlError(f"unsupported resource type: {kind}")


async def expose(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    kind = args.type.lower()
    # Flags are checked before anything is read, as upstream's parseFlags runs first.
    convert_protocol(args.protocol)
    convert_service_type(args.service_type)
    convert_ip_family_policy(args.ip_family_policy, convert_ip_family(args.ip_family))
    owner, selector, ports = await _owner(client, namespace, kind, args.name)
    service = service_manifest(args, namespace, owner, selector, ports)
    try:
        await client.create(SERVICES, service, namespace)
    except (ApiError, OSError) as exc:
        raise VirtctlError(f"service creation failed: {error_message(exc)}") from exc
    print(f"Service {args.service_name} successfully created for {kind} {args.name}")
