"""VM to VM across two embedded nodes: each node has its own bridge and podCIDR, joined in the cluster's namespace;
a bridge-bound guest on one node fetches the page of a bridge-bound guest on the other at its pod IP, at the ClusterIP
of a Service selecting it, and over a secondary NAD bridge the two nodes share; the host reaches it at each node's
InternalIP and the Service's nodePort."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.client.resources import NETWORK_ATTACHMENT_DEFINITIONS, NODES, SERVICES, VIRTUAL_MACHINES
from tests.e2e.test_pod_network import bridge_vm, http_get
from tests.e2e.test_secondary_network import blue_nad, cluster_ns_links
from tests.e2e.test_vm_lifecycle import delete_vm
from tests.support.cluster import ClusterView, EmbeddedCluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

SERVER_SECONDARY = "192.168.82.1"
CLIENT_SECONDARY = "192.168.82.2"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, images_dir: Path) -> Iterator[EmbeddedCluster]:
    """This module's cluster has two nodes."""
    running = EmbeddedCluster.start(tmp_path_factory.mktemp("cluster2"), images_dir, node_count=2)
    yield running
    running.stop()


def pinned(vm: dict[str, Any], node: str) -> dict[str, Any]:
    vm["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return vm


def on_secondary(vm: dict[str, Any], nad_name: str, address: str) -> dict[str, Any]:
    """The VM with a second NIC, bridge-bound to the NAD, at a static address from cloud-init networkData."""
    spec = vm["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if "cloudInitNoCloud" in v)
    network_data = f"network:\n  version: 2\n  ethernets:\n    eth1:\n      addresses:\n        - {address}/24\n"
    volume["cloudInitNoCloud"]["networkData"] = network_data
    spec["domain"]["devices"]["interfaces"].append({"name": "blue-net", "bridge": {}})
    spec["networks"].append({"name": "blue-net", "multus": {"networkName": nad_name}})
    return vm


def fetch(url: str, marker: str) -> str:
    """Shell that retries a page until it comes, then prints it after the marker (the echo expands only then)."""
    return f"while ! wget -q -O /tmp/{marker} {url}; do sleep 1; done; echo {marker} $(cat /tmp/{marker})"


async def test_a_guest_reaches_a_guest_on_the_other_node_at_its_pod_service_and_secondary_ips(
    kube: ClusterView,
) -> None:
    first, second = kube.cluster.nodes[:2]
    ns = await kube.namespace()
    # A secondary bridge without IPAM: in the cluster's namespace, so both nodes' pods are on the same one.
    bridge = f"pkvs{uuid.uuid4().hex[:6]}"
    await kube.admin.create(NETWORK_ATTACHMENT_DEFINITIONS, blue_nad(bridge, "blue", ipam=False), ns)
    server_vm = on_secondary(pinned(bridge_vm("server"), first.name), "blue", SERVER_SECONDARY)
    await kube.admin.create(VIRTUAL_MACHINES, server_vm, ns)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "server"},
        "spec": {
            "type": "NodePort",
            "selector": {"vmi.kubevirt.io/id": "server"},
            "ports": [{"port": 8000, "targetPort": 80}],
        },
    }
    created = await kube.admin.create(SERVICES, service, ns)
    cluster_ip, node_port = created["spec"]["clusterIP"], created["spec"]["ports"][0]["nodePort"]
    server = await kube.wait_vmi_phase(ns, "server", "Running")
    server_pod = await kube.launcher_pod(server)
    server_ip = server_pod["status"]["podIP"]
    assert server["status"]["nodeName"] == first.name

    script = "; ".join(
        [
            fetch(f"http://{server_ip}/", "peer-page"),
            fetch(f"http://{cluster_ip}:8000/", "service-page"),
            fetch(f"http://{SERVER_SECONDARY}/", "secondary-page"),
        ]
    )
    client_vm = on_secondary(pinned(bridge_vm("client", f"({script}) &"), second.name), "blue", CLIENT_SECONDARY)
    await kube.admin.create(VIRTUAL_MACHINES, client_vm, ns)
    client = await kube.wait_vmi_phase(ns, "client", "Running")
    client_pod = await kube.launcher_pod(client)
    assert client["status"]["nodeName"] == second.name
    # Two nodes, two podCIDRs: the page crosses from one node's bridge to the other's.
    client_ip = client_pod["status"]["podIP"]
    assert ipaddress.ip_network(f"{client_ip}/24", strict=False) != ipaddress.ip_network(
        f"{server_ip}/24", strict=False
    )
    await kube.wait_serial(second, client_pod, client, f"pykubevirt-guest: eth0 {client_ip}", timeout=180)
    await kube.wait_serial(second, client_pod, client, "peer-page pykubevirt-guest server", timeout=120)
    # The guest's connection to the ClusterIP is DNATed where the node bridges end, to the server on the other node.
    await kube.wait_serial(second, client_pod, client, "service-page pykubevirt-guest server", timeout=60)
    # And over the secondary bridge the two nodes' launcher pods share.
    await kube.wait_serial(second, client_pod, client, "secondary-page pykubevirt-guest server", timeout=60)
    assert len(cluster_ns_links(kube, "master", bridge)) == 2

    # Every node serves the nodePort at its InternalIP, from the host (the test harness's nodes may share one).
    internal: set[str] = set()
    for node in (first, second):
        registered = await kube.admin.get(NODES, node.name)
        internal |= {a["address"] for a in registered["status"]["addresses"] if a["type"] == "InternalIP"}
    for address in sorted(internal):

        async def page(address: str = address) -> str | None:
            with contextlib.suppress(OSError, TimeoutError):
                return await http_get(address, node_port)
            return None

        assert "pykubevirt-guest server" in await eventually(page, timeout=30, interval=0.5)
    _, out, _ = await kube.run("kubectl", "get", "endpoints", "server", "-n", ns, "-o", "json")
    assert [a["ip"] for a in json.loads(out)["subsets"][0]["addresses"]] == [server_ip]
    await delete_vm(kube, ns, "client")
    await delete_vm(kube, ns, "server")
