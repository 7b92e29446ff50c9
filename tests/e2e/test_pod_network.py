"""A real guest on the embedded pod network: masquerade inside the launcher pod's namespace (k6t-eth0, tap0, the
launcher's DHCP and DHCPv6, KubeVirt's nft rules for both families), reached from the host at the pod's IPv4 and IPv6
addresses on the ports listed only; bridge, where the pod's own address moves to the guest, reached at the pod IP and
by another guest."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from typing import Any

import pytest

from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import PODS, VIRTUAL_MACHINES
from pykubevirt.node import netns
from pykubevirt.node.pod_network import ClusterNetwork, pod_netns
from tests.e2e.test_vm_lifecycle import delete_vm, demo_vm
from tests.support.apiserver_process import kubectl_env
from tests.support.cluster import ClusterView
from tests.support.port_forward import kubectl_port_forward
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e


def masquerade_vm(name: str, ports: list[dict[str, Any]]) -> dict[str, Any]:
    """The demo VM with a masquerade interface; its guest also serves its page on 8080, which `ports` leaves out."""
    vm = demo_vm(name, user_data=f"#cloud-config\nhostname: {name}\nruncmd:\n  - httpd -p 8080 -h /www\n")
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["interfaces"] = [{"name": "default", "masquerade": {}, "ports": ports}]
    spec["networks"] = [{"name": "default", "pod": {}}]
    return vm


def bridge_vm(name: str, runcmd: str = "") -> dict[str, Any]:
    """The demo VM with the bridge binding on the pod network: the guest takes the pod's IP and MAC."""
    commands = f"runcmd:\n  - {runcmd}\n" if runcmd else ""
    vm = demo_vm(name, user_data=f"#cloud-config\nhostname: {name}\n{commands}")
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["interfaces"] = [{"name": "default", "bridge": {}}]
    spec["networks"] = [{"name": "default", "pod": {}}]
    return vm


async def http_get(host: str, port: int) -> str:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5.0)
    writer.write(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    body = await asyncio.wait_for(reader.read(), 10.0)
    writer.close()
    return body.decode(errors="replace")


async def refused(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5.0)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def test_masquerade_forwards_the_listed_port_to_the_guest_and_refuses_the_others(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, masquerade_vm("web", [{"name": "http", "port": 80}]), ns)
    vmi = await kube.wait_vmi_phase(ns, "web", "Running")
    pod = await kube.launcher_pod(vmi)
    pod_ip = pod["status"]["podIP"]
    assert pod_ip != "127.0.0.1" and netns.exists(pod_netns(pod["metadata"]["uid"]))

    async def reported() -> bool:
        current = await kube.vmi(ns, "web")
        return bool(current) and (current["status"].get("interfaces") or [{}])[0].get("ipAddress") == pod_ip

    await eventually(reported, timeout=30)
    _, out, _ = await kube.run("kubectl", "get", "vmi", "web", "-n", ns, "--no-headers")
    assert pod_ip in out.split()
    console = await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: ready")
    await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: eth0 10.0.2.2")
    assert "hostname web" in console

    async def page() -> str | None:
        with contextlib.suppress(OSError, TimeoutError):
            return await http_get(pod_ip, 80)
        return None

    assert "pykubevirt-guest web" in await eventually(page, timeout=60, interval=0.5)
    # The guest listens on 8080 too, but only 80 is forwarded: the pod itself refuses 8080.
    assert await refused(pod_ip, 8080)
    # `kubectl port-forward` to the launcher pod reaches localhost in the pod's namespace, which KubeVirt's
    # masquerade rules (the nat output chain) carry on to the guest.
    env = kubectl_env(kube.cluster.server, kube.cluster.root / "home")
    async with kubectl_port_forward(env, "-n", ns, f"pod/{pod['metadata']['name']}", ":80") as forward:
        assert "pykubevirt-guest web" in await http_get("127.0.0.1", forward.ports[0])
    # `kubectl top` counts the guest's QEMU (a process libvirt moved out of the launcher's group) in `compute`.
    _, top, _ = await kube.run("kubectl", "top", "pod", pod["metadata"]["name"], "-n", ns, "--containers")
    usage = {row.split()[1]: row.split()[3] for row in top.strip().splitlines()[1:]}
    assert usage.keys() >= {"compute", "guest-console-log"}, top
    assert int(usage["compute"].removesuffix("Mi")) >= 100, top  # the 128Mi guest's touched memory and the launcher

    # IPv6, where the pod has it (this host has IPv6, so the pod network is dual-stack): the guest takes fd10:0:2::2
    # from the launcher's DHCPv6 and its route from router advertisements, and the same ports reach it through the
    # ip6 nat rules at the pod's IPv6 address.
    (pod_ipv6,) = [entry["ip"] for entry in pod["status"]["podIPs"] if ":" in entry["ip"]]
    await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: eth0 IPv6 fd10:0:2::2", timeout=120)
    status = (await kube.vmi(ns, "web"))["status"]["interfaces"][0]
    assert status["ipAddress"] == pod_ip and status["ipAddresses"] == [pod_ip, pod_ipv6]

    async def page6() -> str | None:
        proc = await asyncio.create_subprocess_exec(
            "curl", "-g", "-s", "--max-time", "5", f"http://[{pod_ipv6}]:80/", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        return out.decode(errors="replace") if proc.returncode == 0 else None

    assert "pykubevirt-guest web" in await eventually(page6, timeout=60, interval=0.5)
    assert await refused(pod_ipv6, 8080)

    uid = pod["metadata"]["uid"]
    links_before = cluster_links(kube)
    await delete_vm(kube, ns, "web")

    async def pod_gone() -> bool:
        with contextlib.suppress(NotFound):
            await kube.admin.get(PODS, pod["metadata"]["name"], ns)
            return False
        return True

    await eventually(pod_gone, timeout=60)
    assert not netns.exists(pod_netns(uid))
    leases = kube.node.data_dir / "cni" / "ipam" / "pykubevirt"
    assert not (leases / pod_ip).exists() and not (leases / pod_ipv6).exists()
    # The pod's veth went with its namespace; its nft rules and k6t-eth0 lived inside it.
    assert len(cluster_links(kube)) == len(links_before) - 1


async def test_masquerade_without_ports_forwards_everything(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, masquerade_vm("open", []), ns)
    vmi = await kube.wait_vmi_phase(ns, "open", "Running")
    pod = await kube.launcher_pod(vmi)
    await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: ready")

    async def page() -> str | None:
        with contextlib.suppress(OSError, TimeoutError):
            return await http_get(pod["status"]["podIP"], 8080)
        return None

    assert "pykubevirt-guest open" in await eventually(page, timeout=60, interval=0.5)
    await delete_vm(kube, ns, "open")


async def test_bridge_binding_gives_the_guest_the_pod_ip_and_another_guest_reaches_it(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, bridge_vm("bridged"), ns)
    vmi = await kube.wait_vmi_phase(ns, "bridged", "Running")
    pod = await kube.launcher_pod(vmi)
    pod_ip = pod["status"]["podIP"]
    # The guest's own address, as its DHCP client configured it and printed it on the serial console.
    await kube.wait_serial(kube.node, pod, vmi, f"pykubevirt-guest: eth0 {pod_ip}")

    async def reported() -> dict[str, Any] | None:
        current = await kube.vmi(ns, "bridged")
        interfaces = (current or {}).get("status", {}).get("interfaces") or [{}]
        return interfaces[0] if interfaces[0].get("ipAddress") == pod_ip and interfaces[0].get("mac") else None

    primary = await eventually(reported, timeout=30)
    # Both pod IPs (the IPv6 one stays in the pod: bridge binding's DHCP gives the guest IPv4 only, as KubeVirt's).
    assert primary["name"] == "default" and primary["ipAddresses"] == [e["ip"] for e in pod["status"]["podIPs"]]
    assert primary["podInterfaceName"] == "eth0" and primary["linkState"] == "up"
    assert "domain" in primary["infoSource"]
    _, out, _ = await kube.run("kubectl", "get", "vmi", "bridged", "-n", ns, "--no-headers")
    assert pod_ip in out.split()

    async def page(ip: str) -> str | None:
        with contextlib.suppress(OSError, TimeoutError):
            return await http_get(ip, 80)
        return None

    # The host reaches the guest's httpd at the pod IP: no NAT, the guest itself holds the address.
    assert "pykubevirt-guest bridged" in await eventually(lambda: page(pod_ip), timeout=60, interval=0.5)

    # VM to VM on one node: a second bridged guest fetches the first one's page over the pod network.
    fetch = f"while ! wget -q -O /tmp/peer http://{pod_ip}/; do sleep 1; done && echo peer-page $(cat /tmp/peer) &"
    await kube.admin.create(VIRTUAL_MACHINES, bridge_vm("client", fetch), ns)
    client = await kube.wait_vmi_phase(ns, "client", "Running")
    client_pod = await kube.launcher_pod(client)
    assert client_pod["status"]["podIP"] != pod_ip
    await kube.wait_serial(kube.node, client_pod, client, f"pykubevirt-guest: eth0 {client_pod['status']['podIP']}")
    await kube.wait_serial(kube.node, client_pod, client, "peer-page pykubevirt-guest bridged")
    await delete_vm(kube, ns, "client")
    await delete_vm(kube, ns, "bridged")


def cluster_links(kube: ClusterView) -> list[str]:
    """The devices of the cluster's namespace (node bridges, the host link, one veth per pod)."""
    name = ClusterNetwork(kube.cluster.layout.cluster_cidr).netns
    out = subprocess.run(["ip", "-n", name, "-o", "link"], capture_output=True, text=True, check=True).stdout
    return [line.split(":")[1].strip() for line in out.splitlines()]
