"""Real guests on a secondary (Multus) network: a NetworkAttachmentDefinition with the CNI bridge plugin and
host-local IPAM, the `bridge` binding plumbed into the launcher pod (k6t-<hash>, tap<hash>, DHCP to the guest's
second NIC), the two guests pinging each other from their serial consoles, and nothing left after deletion."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import network_attachment as nad
from pykubevirt.api.kubevirt import network_names
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import NETWORK_ATTACHMENT_DEFINITIONS, PODS, VIRTUAL_MACHINES
from pykubevirt.node import netns
from pykubevirt.node.pod_network import ClusterNetwork, pod_netns
from tests.e2e.test_vm_lifecycle import delete_vm, demo_vm
from tests.support.apiserver_process import kubectl_env
from tests.support.cluster import ClusterView
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

SUBNET = "192.168.78.0/24"
POD_IFACE = network_names.hashed_interface("blue-net")


def secondary_vm(name: str, nad_name: str = "blue", static: str = "") -> dict[str, Any]:
    """The demo VM with masquerade on the pod network (its eth0) and a bridge on a NAD (its eth1), configured by
    DHCP, or with a `static` address by cloud-init networkData."""
    vm = demo_vm(name, user_data=f"#cloud-config\nhostname: {name}\n")
    spec = vm["spec"]["template"]["spec"]
    if static:
        volume = next(v for v in spec["volumes"] if "cloudInitNoCloud" in v)
        network_data = f"network:\n  version: 2\n  ethernets:\n    eth1:\n      addresses:\n        - {static}\n"
        volume["cloudInitNoCloud"]["networkData"] = network_data
    spec["domain"]["devices"]["interfaces"] = [
        {"name": "default", "masquerade": {}},
        {"name": "blue-net", "bridge": {}},
    ]
    spec["networks"] = [{"name": "default", "pod": {}}, {"name": "blue-net", "multus": {"networkName": nad_name}}]
    return vm


def blue_nad(bridge: str, name: str = "blue", ipam: bool = True) -> dict[str, Any]:
    config: dict[str, Any] = {"cniVersion": "0.3.1", "name": name, "type": "bridge", "bridge": bridge}
    if ipam:
        config["ipam"] = {"type": "host-local", "subnet": SUBNET}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name},
        "spec": {"config": json.dumps(config)},
    }


async def console_command(kube: ClusterView, ns: str, name: str, command: str) -> None:
    """Type a command on the guest's serial console (its output lands in the serial log)."""
    virtctl = str(Path(sys.executable).parent / "virtctl")
    env = kubectl_env(kube.cluster.server, kube.cluster.root / "home")
    process = await asyncio.create_subprocess_exec(
        virtctl, "console", name, "-n", ns, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(f"{command}\n".encode()), 60)
    assert process.returncode == 0, err.decode()


def cluster_ns_links(kube: ClusterView, *args: str) -> list[str]:
    name = ClusterNetwork(kube.cluster.layout.cluster_cidr).netns
    out = subprocess.run(["ip", "-n", name, "-o", "link", "show", *args], capture_output=True, text=True, check=False)
    return [line.split(":")[1].strip() for line in out.stdout.splitlines()]


async def test_two_guests_on_one_nad_bridge_reach_each_other(kube: ClusterView) -> None:
    ns = await kube.namespace()
    bridge = f"pkvs{uuid.uuid4().hex[:6]}"
    await kube.admin.create(NETWORK_ATTACHMENT_DEFINITIONS, blue_nad(bridge), ns)
    for name in ("left", "right"):
        await kube.admin.create(VIRTUAL_MACHINES, secondary_vm(name), ns)
    guests: dict[str, dict[str, Any]] = {}
    for name in ("left", "right"):
        vmi = await kube.wait_vmi_phase(ns, name, "Running")
        pod = await kube.launcher_pod(vmi)
        console = await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: eth1 192.168.78.", timeout=120)
        (address,) = re.findall(r"pykubevirt-guest: eth1 (192\.168\.78\.\d+)", console)[:1]
        guests[name] = {"vmi": vmi, "pod": pod, "ip": address}

    for name, guest in guests.items():
        # Multus's network-status: the default network, then blue under KubeVirt's pod interface name, with the
        # address the guest took by DHCP from its launcher.
        default, blue = nad.read_network_status(guest["pod"])
        assert default["default"] is True and default["ips"] == [e["ip"] for e in guest["pod"]["status"]["podIPs"]]
        assert blue["name"] == f"{ns}/blue" and blue["interface"] == POD_IFACE
        assert blue["ips"] == [guest["ip"]] and ipaddress.IPv4Address(guest["ip"]) in ipaddress.IPv4Network(SUBNET)

        async def reported(name: str = name, blue: dict[str, Any] = blue) -> dict[str, Any] | None:
            current = await kube.vmi(ns, name)
            interfaces = (current or {}).get("status", {}).get("interfaces") or []
            entry = next((i for i in interfaces if i.get("name") == "blue-net"), None)
            if entry is None or "multus-status" not in str(entry.get("infoSource")) or not entry.get("ipAddress"):
                return None
            return entry

        entry = await eventually(reported, timeout=30)
        assert entry["ipAddress"] == guest["ip"] and entry["ipAddresses"] == [guest["ip"]]
        assert entry["podInterfaceName"] == POD_IFACE and entry["mac"] == blue["mac"]
        # The guest agent, when it has reported the NIC by its MAC, is a source as well.
        assert entry["infoSource"] in ("domain, multus-status", "domain, guest-agent, multus-status")

    for name, peer in (("left", "right"), ("right", "left")):
        guest = guests[name]
        marker = f"secnet-{name}-reached-{peer}"
        # The quotes keep the marker out of the console's echo of the command line: only the output matches.
        command = f"ping -c 3 -W 2 {guests[peer]['ip']} >/dev/null && echo secnet-{name}-reach''ed-{peer}"
        await console_command(kube, ns, name, command)
        await kube.wait_serial(kube.node, guest["pod"], guest["vmi"], marker, timeout=60)

    uids = [g["pod"]["metadata"]["uid"] for g in guests.values()]
    leases = ClusterNetwork(kube.cluster.layout.cluster_cidr).shared_ipam_dir / "blue"
    assert all((leases / g["ip"]).exists() for g in guests.values())
    assert len(cluster_ns_links(kube, "master", bridge)) == 2
    for name in guests:
        await delete_vm(kube, ns, name)
    for guest in guests.values():

        async def pod_gone(pod: dict[str, Any] = guest["pod"]) -> bool:
            with contextlib.suppress(NotFound):
                await kube.admin.get(PODS, pod["metadata"]["name"], ns)
                return False
            return True

        await eventually(pod_gone, timeout=60)
    assert not any(netns.exists(pod_netns(uid)) for uid in uids)
    assert not any((leases / g["ip"]).exists() for g in guests.values())

    # The pods' veths on the secondary bridge go with them; the bridge itself stays, as the CNI plugin leaves it.
    # The kernel tears a deleted namespace's devices down in its own time (cleanup_net runs from a workqueue), so
    # the peer on the bridge may outlive `ip netns del` by a moment.
    async def veths_gone() -> bool:
        return cluster_ns_links(kube, "master", bridge) == []

    await eventually(veths_gone, timeout=15)


async def test_without_ipam_guests_take_static_addresses_from_network_data(kube: ClusterView) -> None:
    ns = await kube.namespace()
    bridge = f"pkvs{uuid.uuid4().hex[:6]}"
    await kube.admin.create(NETWORK_ATTACHMENT_DEFINITIONS, blue_nad(bridge, "plain", ipam=False), ns)
    addresses = {"east": "192.168.81.10", "west": "192.168.81.11"}
    for name, address in addresses.items():
        await kube.admin.create(VIRTUAL_MACHINES, secondary_vm(name, "plain", f"{address}/24"), ns)
    guests: dict[str, dict[str, Any]] = {}
    for name, address in addresses.items():
        vmi = await kube.wait_vmi_phase(ns, name, "Running")
        pod = await kube.launcher_pod(vmi)
        await kube.wait_serial(kube.node, pod, vmi, f"pykubevirt-guest: network-config eth1 {address}/24", timeout=120)
        await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: ready")
        guests[name] = {"vmi": vmi, "pod": pod}
        # Multus reports the attachment without addresses; the interface is there all the same.
        _, plain = nad.read_network_status(pod)
        assert plain["name"] == f"{ns}/plain" and plain["interface"] == POD_IFACE and "ips" not in plain
    for name, peer in (("east", "west"), ("west", "east")):
        command = f"ping -c 3 -W 2 {addresses[peer]} >/dev/null && echo secnet-{name}-reach''ed-{peer}"
        await console_command(kube, ns, name, command)
        guest = guests[name]
        await kube.wait_serial(kube.node, guest["pod"], guest["vmi"], f"secnet-{name}-reached-{peer}", timeout=60)
    for name in addresses:
        await delete_vm(kube, ns, name)
